"""A tuning point that makes another option wrong (``lr_min`` >= a tuned ``lr``) names that option as it is, with the
point, as a grid variant's error does; it said ``tune.client.lr_min``, a key no ``[tune]`` table held."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

CONFIG = """name = "tunecos"
out_dir = "{out}"
[federation]
num_clients = 3
rounds = 2
[client]
lr = 0.05
lr_schedule = "cosine"
lr_min = 0.005
[eval]
validation = 0.2
[dataset]
name = "digits"
[model]
name = "mlp"
[compare]
seeds = [0]
[tune]
"client.lr" = [{low}, 0.05]
"""


def _error(tmp_path: Path, capsys: pytest.CaptureFixture[str], low: float, *extra: str) -> str:
    config = tmp_path / "tune.toml"
    config.write_text(CONFIG.format(out=tmp_path / "out", low=low))
    assert main(["compare", str(config), "--dry-run", *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not (tmp_path / "out").exists()
    return err[0]


def test_the_field_a_tuning_point_makes_wrong_is_named_with_the_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(tmp_path, capsys, 0.001) == "chillfl: error: client.lr_min: must be in [0, lr = 0.001), got 0.005 (tuning point client.lr=0.001)"


def test_under_a_grid_the_variant_is_named_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(tmp_path, capsys, 0.001, "--grid", "client.momentum=0,0.5") == (
        "chillfl: error: client.lr_min: must be in [0, lr = 0.001), got 0.005 (tuning point client.lr=0.001) (grid variant client.momentum=0.0)")


def test_a_bad_tuned_value_still_names_the_tune_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(tmp_path, capsys, -1.0) == "chillfl: error: tune.client.lr: must be > 0, got -1.0"

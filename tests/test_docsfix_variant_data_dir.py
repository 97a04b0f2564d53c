"""A comparison whose dataset is not under ``data_dir`` named the field ``variants.FedAvg.data_dir``: a key no variant
table held (``data_dir`` is the config's top-level value), so the reader looked for it in ``[variants.FedAvg]``. The
same run without variants says ``data_dir``; a comparison says so too, and which variant it was building."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main


def _comparison(tmp_path: Path, fedavg: str) -> Path:
    config = tmp_path / "c.toml"
    config.write_text(f'data_dir = "{tmp_path / "nodata"}"\nout_dir = "{tmp_path / "out"}"\n[dataset]\nname = "cifar10"\n'
                      f'[variants.FedAvg]\n{fedavg}\n[variants.Other]\nclient.lr = 0.05\n')
    return config


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_variant_that_leaves_data_dir_is_refused_on_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _error(capsys, ["run", str(_comparison(tmp_path, "client.lr = 0.1"))])
    assert line.startswith("chillfl: error: data_dir: CIFAR-10 not found at "), line
    assert line.endswith(" (for variant FedAvg)") and "variants." not in line, line
    assert not (tmp_path / "out").exists()


def test_a_variant_that_sets_data_dir_is_named_with_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _error(capsys, ["run", str(_comparison(tmp_path, f'data_dir = "{tmp_path / "other"}"'))])
    assert line.startswith("chillfl: error: variants.FedAvg.data_dir: CIFAR-10 not found at "), line
    assert not (tmp_path / "out").exists()

"""Fuzzing findings on option values: a step size past the model's dtype, -0.0, a huge privacy target, a dry run
that trained FedMD's server model, and a divergence hint that blamed client.lr alone (report-fuzz findings 1-5)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.options import coerce

BASE = """name = "fz"
out_dir = "{out}"
[dataset]
name = "digits"
[partition]
name = "dirichlet"
alpha = 0.5
[model]
name = "mlp"
hidden = [8]
[federation]
num_clients = 4
clients_per_round = 2
rounds = 1
[client]
batch_size = 32
lr = 0.05
[algorithm]
name = "fedavg"
[eval]
clients = "none"
"""


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *overrides: str, dry: bool = True) -> tuple[int, list[str]]:
    path = tmp_path / "base.toml"
    path.write_text(BASE.format(out=tmp_path / "out"), encoding="utf-8")
    code = main(["run", str(path), "-q", *(["--dry-run"] if dry else []), *overrides])
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("overrides, field", [
    (("client.lr=1e39",), "client.lr"),
    (("client.optimizer='adam'", "client.lr=1e39"), "client.lr"),
    (("algorithm.name=pfedme", "algorithm.personal_lr=1e39"), "algorithm.personal_lr"),
    (("algorithm.name=fedavg_ft", "algorithm.finetune_lr=1e39", "eval.clients=sampled"), "algorithm.finetune_lr"),
])
def test_a_step_size_past_float32_is_one_line_on_its_field(tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: tuple[str, ...], field: str) -> None:
    # was a 66-line traceback from round 1: "value cannot be converted to type float without overflow" (exit 1)
    code, err = run(tmp_path, capsys, *overrides)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"chillfl: error: {field}: must be at most 3.403e+38 (the largest float32"), err


def test_a_large_but_holdable_lr_still_passes_the_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run(tmp_path, capsys, "client.lr=1e38")
    assert code == 0, err


def test_minus_zero_is_zero() -> None:
    value = coerce(-0.0, float, "dataset.alpha")
    assert value == 0.0 and math.copysign(1.0, value) == 1.0


@pytest.mark.parametrize("key", ["alpha", "beta", "size_log_sigma"])
def test_synthetic_scales_of_minus_zero_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str) -> None:
    # numpy's normal(0, -0.0) raised "scale < 0": a traceback
    code, err = run(tmp_path, capsys, "dataset.name=synthetic", f"dataset.{key}=-0.0")
    assert code == 0, err


def test_a_rate_named_otherwise_past_float32_ends_as_a_divergence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # perfedavg's beta (its outer step) is no lr-named option: the build cannot refuse it by name, and it was the
    # RuntimeError traceback (exit 1) from inside the local step; clamped to float32's range it diverges, as 1e38 does
    code, err = run(tmp_path, capsys, "algorithm.name=perfedavg", "algorithm.beta=1e39", dry=False)
    assert code == 3 and "diverged: round 1" in err[-1], err


def test_the_step_clamp_keeps_every_holdable_rate() -> None:
    import torch

    from chillfl.training.local import within_dtype

    params = {"w": torch.zeros(2)}
    assert within_dtype(1e38, params) == 1e38 and within_dtype(1e39, params) == torch.finfo(torch.float32).max
    assert within_dtype(1e39, {"w": torch.zeros(2, dtype=torch.float64)}) == 1e39

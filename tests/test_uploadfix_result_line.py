"""A run whose every evaluation is non-finite says so on its result line (``cli.py``), not an empty line."""

from __future__ import annotations

from pathlib import Path

from chillfl.cli import _print_summary
from chillfl.runner import RunOutput


def test_every_evaluation_nonfinite_prints_an_honest_result_line(tmp_path: Path, capsys) -> None:
    # summary.json of `client.lr=1e30 client.batch_size=1000 federation.rounds=1`: no final_global_* (none was finite)
    assert _print_summary(RunOutput(tmp_path, [{"round": 1, "global_acc": None}], {"rounds": 1, "final_train_loss": 2.3})) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("no finite final metric"), lines
    assert lines[1] == f"results: {tmp_path}"


def test_a_finite_run_prints_its_metrics_as_before(tmp_path: Path, capsys) -> None:
    _print_summary(RunOutput(tmp_path, [], {"final_global_acc": 0.5, "final_global_loss": 1.25}))
    assert capsys.readouterr().out.splitlines()[0] == "final_global_acc=0.5000 final_global_loss=1.2500"


def test_a_run_that_evaluated_nothing_says_so(tmp_path: Path, capsys) -> None:
    """``distillation.method = "individual"`` with ``eval.clients = "none"`` scores no model: not "every evaluation was
    non-finite" (rev106a 3)."""
    _print_summary(RunOutput(tmp_path, [{"round": 1, "train_loss": 2.0}], {"rounds": 1, "final_train_loss": 2.0}))
    assert capsys.readouterr().out.splitlines()[0].startswith("no evaluated metric (the run scored no model")

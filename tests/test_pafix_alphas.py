"""metrics.pa3fed_alphas: a run with no adapted round has no mean shift ("-"), which the folder mean leaves out."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from chillfl.metrics.pa3fed_alphas import HEADER, alpha_summary, main, mean_summary

ADAPTED = [  # PA3Fed (CLP only): round 2 adapted with shift 0.02, round 3 not (0.1 measured, unused)
    {"round": 1, "agg_clp": False, "agg_adapted": False, "agg_alphas": {"0": 1.0, "1": 1.0}, "agg_weight_shift": 0.0},
    {"round": 2, "agg_clp": True, "agg_adapted": True, "agg_alphas": {"0": 0.9, "1": 0.8}, "agg_weight_shift": 0.02},
    {"round": 3, "agg_clp": False, "agg_adapted": False, "agg_alphas": {"0": 0.7, "1": 0.6}, "agg_weight_shift": 0.1},
]
NEVER = [{**r, "agg_adapted": False} for r in ADAPTED]  # mode = "never": the same rounds, none adapted


def test_no_adapted_round_has_no_mean_shift() -> None:
    s = alpha_summary(NEVER)
    assert math.isnan(s.shift_adapted)  # not 0.0: nothing was adapted, so there is no mean to report
    assert s.shift_max == pytest.approx(0.1)  # the max is over every round, adapted or not


def test_folder_mean_leaves_a_run_without_adapted_rounds_out() -> None:
    m = mean_summary([alpha_summary(ADAPTED), alpha_summary(NEVER)])
    assert m.shift_adapted == pytest.approx(0.02)  # the adapted run's alone, not (0.02 + 0) / 2
    assert m.shift_max == pytest.approx(0.1)
    assert math.isnan(mean_summary([alpha_summary(NEVER)]).shift_adapted)


def test_cli_prints_a_dash_and_names_the_max_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "cmp"
    for name, records in (("FedAvg", NEVER), ("PA3Fed", ADAPTED)):
        (folder / name).mkdir(parents=True)
        (folder / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main([str(folder), "--runs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == HEADER.splitlines()[0] and lines[0].endswith("| max over all rounds |")
    rows = [line for line in lines if line.startswith(f"| {folder}")]
    assert rows == [
        f"| {folder} / FedAvg | 3 | 33 | 0 | 0.600 / 0.750 / 0.900 | 33 | - | 0.1000 |",
        f"| {folder} / PA3Fed | 3 | 33 | 33 | 0.600 / 0.750 / 0.900 | 33 | 0.0200 | 0.1000 |",
        f"| {folder} (mean of 2 runs) | 3 | 33 | 17 | 0.600 / 0.750 / 0.900 | 33 | 0.0200 | 0.1000 |",
    ]


def test_a_run_whose_records_hold_no_client_has_no_first_share() -> None:
    """Rounds in which no client trained (``agg_alphas`` empty) divided by zero."""
    from chillfl.metrics.pa3fed_alphas import alpha_summary, row

    summary = alpha_summary([{"round": 1, "agg_alphas": {}, "agg_clp": False}])
    assert math.isnan(summary.first_share)
    assert "| - |" in row("r", summary)

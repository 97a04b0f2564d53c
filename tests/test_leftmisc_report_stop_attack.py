"""The HTML report's final backdoor success of a run a hook stopped at a skipped round: its summary's stop-round
evaluation (``stop_evaluation``) says what the stopped model measured, and where that holds no success (the probe
measured nothing), the cell is a dash, "not measured". It fell back to ``metrics.jsonl``, whose stop round is the
skipped one, and showed the round before's success as the final one. Hand-made run outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chillfl.config import RunConfig
from chillfl.plots.stop import STOP_EVALUATION
from chillfl.report.html import Group, Run, _metrics_columns, _metrics_row, _value

KEY = "final_attack_success_rate"
STOPPED_AT_SKIPPED: list[dict[str, Any]] = [{"round": 1, "global_acc": 0.8, "attack_success_rate": 0.25},
                                            {"round": 2, "skipped": True, "attackers": []}]


def _run(summary: dict[str, Any], seed: int = 0) -> Run:
    return Run(Path(f"s{seed}"), RunConfig(seed=seed), [dict(r) for r in STOPPED_AT_SKIPPED], summary)


def test_a_stop_probe_that_measured_nothing_is_no_earlier_rounds_success() -> None:
    summary = {"final_global_acc": 0.8, "best_global_acc": 0.8, "stopped": {"round": 2, "reason": "a hook"},
               STOP_EVALUATION: {"global_acc": 0.8, "attack_success_rate": None}}  # as summary.json holds it (null)
    run = _run(summary)
    assert _value(run, KEY) is None  # was 0.25, round 1's
    measured = _run({**summary, KEY: 0.5, STOP_EVALUATION: {"global_acc": 0.8, "attack_success_rate": 0.5}}, seed=1)
    assert _value(measured, KEY) == 0.5  # a stop probe that measured one: the summary's
    row = _metrics_row(Group("stopped", [run, measured]), _metrics_columns([Group("stopped", [run, measured])]))
    assert "50.00" in row and "37.50" not in row  # the mean over the one run that measured it, not over 0.25 and 0.5
    assert all(key != KEY for key, _, _ in _metrics_columns([Group("stopped", [run])]))  # none measured: no column


def test_a_summary_written_before_it_kept_the_key_still_reads_the_records() -> None:
    # no stop evaluation, no key (a summary from before 2026-11-28): the last round that ran, as the skipped one kept its model
    assert _value(_run({"final_global_acc": 0.8}), KEY) == 0.25

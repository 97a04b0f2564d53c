"""A run a callback stops at a round ``eval.every`` skips: every summary figure (``rounds_to_target``,
``communication.bytes_to_target``, ``target_eval_interval``) reads the same records, those with the stop round's
evaluation; a prototype method without a shared model gets that evaluation by its own measure; and the report's
rounds-to-target caveat describes the summary's number."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import chillfl
from chillfl.report.html import write_report
from chillfl.storage.results import summarize

CONFIG: dict[str, Any] = {
    "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "federation": {"num_clients": 4, "rounds": 6},
    "eval": {"every": 4, "client_split_size": 20, "target_accuracy": 0.05}, "checkpoint": {"every": 0}, "seed": 5,
}


def stop_at_3(record: dict[str, Any], run: Any) -> None:
    if record["round"] == 3:
        run.stop("plateau")


def test_bytes_to_target_agrees_with_rounds_to_target_and_the_report_keeps_the_caveat(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stopped = chillfl.run(config={**CONFIG, "name": "st", "out_dir": str(out)}, callbacks=[stop_at_3], progress=False)
    assert stopped.folder is not None and all("global_acc" not in r for r in stopped.records)
    summary = json.loads((stopped.folder / "summary.json").read_text())
    assert summary["rounds_to_target"] == 3 and summary["target_eval_interval"] == 3
    # the bytes through round 3, where the target was measured reached (was null: read from records without that evaluation)
    assert summary["communication"]["bytes_to_target"] == stopped.records[2]["bytes_cumulative"] == summary["communication"]["bytes_total"]
    page = write_report([stopped.folder], tmp_path / "r.html").read_text()
    assert "rounds to target (first evaluated round; evaluated every 3 rounds, eval.every)" in page  # was plain "rounds to target"


def test_a_stopped_fedproto_run_without_a_shared_model_gets_its_own_final_accuracy() -> None:
    config = {**CONFIG, "prototypes": {"method": "fedproto"}, "federation": {"num_clients": 4, "rounds": 3}}
    full = chillfl.run(config=config, write=False, progress=False)  # round 3 is its last: evaluated
    stopped = chillfl.run(config={**config, "federation": {"num_clients": 4, "rounds": 6}}, callbacks=[stop_at_3], write=False, progress=False)
    assert "global_acc" not in stopped.records[-1] and stopped.summary["stopped"]["round"] == 3
    for key in ("final_global_acc", "final_global_loss", "rounds_to_target", "target_eval_interval"):  # the same model, the same measure
        assert stopped.summary[key] == full.summary[key], key
    assert full.summary["target_eval_interval"] == 3 and isinstance(full.summary["final_global_acc"], float)


def test_no_measured_round_claims_no_interval() -> None:
    records = [{"round": 1, "train_loss": 1.0}, {"round": 2, "train_loss": 0.9}]
    summary = summarize(records, 0.5)
    assert summary["rounds_to_target"] is None and summary["target_eval_interval"] is None  # was 1: "every round measured, never met"
    measured = summarize([records[0], {**records[1], "global_acc": 0.4}], 0.5)
    assert measured["rounds_to_target"] is None and measured["target_eval_interval"] == 2

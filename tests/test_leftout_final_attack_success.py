"""``summary.json``'s ``final_attack_success_rate`` is the backdoor success the run's reported round measured: where
that round measured none (a stop round whose protocol had no global model to probe), it is absent ("not measured"),
not an earlier round's value, which is another model's. A skipped last round trained nothing: its model is the last
round that ran's, whose value stands. Read from a hand-built ``metrics.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chillfl.storage.results import read_metrics, summarize


def summarized(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return summarize(read_metrics(tmp_path))


def test_a_null_success_at_the_reported_round_is_not_measured_not_an_earlier_rounds(tmp_path: Path) -> None:
    summary = summarized(tmp_path, [{"round": 1, "attackers": [0], "attack_success_rate": 0.25},
                                    {"round": 2, "attackers": [], "attack_success_rate": None}])
    assert summary["rounds"] == 2
    assert "final_attack_success_rate" not in summary  # was 0.25, round 1's, reported as round 2's


def test_a_ran_round_without_the_key_is_not_measured_either(tmp_path: Path) -> None:
    summary = summarized(tmp_path, [{"round": 1, "attack_success_rate": 0.25}, {"round": 2, "train_loss": 1.0}])
    assert "final_attack_success_rate" not in summary


def test_the_reported_rounds_value_and_a_skipped_last_rounds_model(tmp_path: Path) -> None:
    from chillfl.storage.results import value_at_end  # the helper the comparison tables and the HTML report read it with

    assert summarized(tmp_path, [{"round": 1, "attack_success_rate": 0.25}, {"round": 2, "attack_success_rate": 0.5}])["final_attack_success_rate"] == 0.5
    skipped = [{"round": 1, "attack_success_rate": 0.25}, {"round": 2, "skipped": True, "attackers": []}]
    assert summarized(tmp_path, skipped)["final_attack_success_rate"] == 0.25  # round 2 trained nothing: round 1's model
    assert summarized(tmp_path, [{"round": 1, "global_acc": 0.5}])["rounds"] == 1 and value_at_end([{"round": 1}], "attack_success_rate") is None
    stopped_at_skipped = [{"round": 1, "attack_success_rate": 0.25}, {"round": 2, "skipped": True, "attack_success_rate": None}]
    assert value_at_end(stopped_at_skipped, "attack_success_rate") is None  # the stop round's own measure: none

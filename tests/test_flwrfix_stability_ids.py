"""Client ids that are not whole numbers: a plugin aggregator's ``round_metrics()`` may key a per-client table by any
str (``{"scores": {"site-0": ...}}``, written as ``agg_scores``), and ``python -m chillfl.metrics.stability --source
agg_scores`` read every id with ``int()``: such a run was refused as "malformed". Ids are now kept as they are, in the
one client order of the sinks (:func:`chillfl.metrics.records.client_order`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.engine.record import RoundRecord
from chillfl.metrics.stability import client_trajectories, main, stability_summary
from chillfl.storage.jsonl import encode_record


def _plugin_run(folder: Path) -> Path:
    """A metrics.jsonl as a run of a plugin aggregator reporting ``scores`` by site name writes it (RoundRecord, encoded)."""
    folder.mkdir(parents=True)
    lines = []
    for rnd in (1, 2, 3):
        losses = {str(c): 1.0 / (rnd + c) for c in range(3)}
        scores = {f"site-{c}": 0.5 * rnd + c for c in range(3)}
        record = RoundRecord(round=rnd, clients=[0, 1, 2], client_train_loss=losses, method={"scores": scores}).to_json()
        lines.append(json.dumps(encode_record(record), sort_keys=True, allow_nan=False))
    (folder / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def test_the_table_of_a_plugins_named_scores(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _plugin_run(tmp_path / "named")
    assert main(["--source", "agg_scores", str(run)]) == 0
    out, err = capsys.readouterr()
    row = out.splitlines()[2]
    assert err == "" and row.startswith("| named |") and "3 of 3" in row


def test_ids_are_kept_as_they_are_in_the_sinks_order() -> None:
    """Whole numbers, in memory (``2``) or read back (``"2"``), are one client and sort as numbers; other ids as text, after."""
    records = [
        {"round": 1, "agg_scores": {"site-b": 1.0, 10: 2.0, 2: 3.0, "site-a": 4.0}},
        {"round": 2, "agg_scores": {"2": 5.0, "10": 6.0, "site-a": 7.0, "07": 8.0}},
    ]
    got = client_trajectories(records, "agg_scores")
    assert list(got) == [2, 10, "07", "site-a", "site-b"]
    assert got[2] == {1: 3.0, 2: 5.0} and got["site-a"] == {1: 4.0, 2: 7.0} and got["07"] == {2: 8.0}
    summary = stability_summary(records, source="agg_scores")
    assert summary is not None and summary["clients"] == 5 and summary["table1_clients"]["std"] == 3

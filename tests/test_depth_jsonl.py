"""A non-finite value nested in a round's record (a client's loss in a per-client table, a NaN in a list) reads back
from ``metrics.jsonl`` as the float it was, as the record's own values do: it read back as None ("not measured"), so a
resumed run's records (its first rounds read back from disk) differed from the uninterrupted run's in memory."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

from chillfl.errors import json_loads
from chillfl.metrics.records import read_records
from chillfl.storage.jsonl import NONFINITE, decode_record, encode_record
from chillfl.storage.results import ResultWriter, read_metrics
from chillfl.storage.run_folder import _metrics_until

RECORDS: list[dict[str, Any]] = [
    {"round": 1, "global_loss": 0.5, "client_train_loss": {"2": 0.25, "10": 0.75}},
    {
        "round": 2,
        "global_loss": math.nan,
        "client_train_loss": {"2": math.inf, "10": 0.5, "11": None},  # None: "not measured", which stays None
        "agg_scores": {"3": -math.inf},
        "curve": [1.0, math.nan, None, [math.inf, 2.0]],
        "nested": [{"a": math.nan, "b": [0.0, -math.inf]}],
    },
]


def _text(record: Any) -> str:
    """The record as Python's own JSON spells it, NaN and the infinities as literals: equal text, equal record."""
    return json.dumps(record, sort_keys=True)


def _line(record: dict[str, Any]) -> str:
    return json.dumps(encode_record(record), sort_keys=True, allow_nan=False)


def test_nested_non_finite_values_are_marked_and_read_back_exactly() -> None:
    line = json.loads(_line(RECORDS[1]))
    assert line[NONFINITE] == {
        "global_loss": "nan",
        "client_train_loss": {"2": "inf"},
        "agg_scores": {"3": "-inf"},
        "curve": {"1": "nan", "3": {"0": "inf"}},
        "nested": {"0": {"a": "nan", "b": {"1": "-inf"}}},
    }
    assert line["client_train_loss"] == {"2": None, "10": 0.5, "11": None} and line["curve"] == [1.0, None, None, [None, 2.0]]
    back = decode_record(json_loads(_line(RECORDS[1])))
    assert _text(back) == _text(RECORDS[1])
    assert back["client_train_loss"]["11"] is None and back["curve"][2] is None
    # int-keyed tables (as the aggregators hold them) come back as JSON has them, string keys, values exact
    in_memory = {"round": 3, "agg_scores": {2: math.nan, 10: 1.0}}
    assert _text(decode_record(json_loads(_line(in_memory)))) == _text(json.loads(json.dumps(in_memory)))
    # decoded without a JSON round trip (an encoded record in memory): the positions and keys as they are
    assert _text(decode_record(encode_record(in_memory) | {})) == _text(in_memory)


def test_every_reader_of_metrics_jsonl_reads_them_back(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path, "run")
    for record in RECORDS:
        writer.append(record)
    folder = writer.finish()
    assert _text(read_metrics(folder)) == _text(RECORDS)
    assert _text(read_records(folder / "metrics.jsonl")) == _text(RECORDS)
    data = (folder / "metrics.jsonl").read_bytes()
    run = {"metrics_bytes": len(data), "metrics_sha256": hashlib.sha256(data).hexdigest()}
    prefix, records = _metrics_until(folder / "metrics.jsonl", run, 2, force=False)  # what a resume reads
    assert prefix == data and _text(records) == _text(RECORDS)
    forced, records = _metrics_until(folder / "metrics.jsonl", {}, 2, force=True)  # --force writes what it read again
    assert forced == data and _text(records) == _text(RECORDS)


def test_an_older_file_reads_as_before(tmp_path: Path) -> None:
    """A line written before tables were marked: the record's own NaN marked, a table's NaN a bare null (None)."""
    lines = [
        {"round": 1, "global_loss": 0.5, "client_train_loss": {"2": None}},
        {"round": 2, "global_loss": None, "client_train_loss": {"2": None, "10": 0.5}, NONFINITE: {"global_loss": "nan"}},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    for records in (read_metrics(tmp_path), read_records(tmp_path / "metrics.jsonl")):
        assert records[0] == lines[0] and math.isnan(records[1]["global_loss"])
        assert records[1]["client_train_loss"] == {"2": None, "10": 0.5} and NONFINITE not in records[1]


@pytest.mark.parametrize("marker", [
    {"t": {"9": "nan"}},  # no such client
    {"t": {"2": "nan"}},  # a value that is not null
    {"t": "nan"},  # a table is no null
    {"l": {"5": "inf"}}, {"l": {"01": "inf"}}, {"l": {"-1": "inf"}},  # no such position
    {"l": {"0": {"0": "nan"}}},  # a null is no table
    {"t": {"3": "NaN"}}, {"t": ["3"]},
])
def test_a_nested_marker_that_names_no_null_is_refused_and_changes_nothing(marker: dict[str, Any]) -> None:
    record = {"round": 1, "t": {"2": 0.5, "3": None}, "l": [None, 1.0], NONFINITE: {"l": {"0": "nan"}, **marker}}
    with pytest.raises(ValueError, match=f"{NONFINITE!r} must map keys whose value is null"):
        decode_record(record)
    assert record["l"][0] is None and record["t"]["3"] is None  # the valid marks before the bad one were not applied

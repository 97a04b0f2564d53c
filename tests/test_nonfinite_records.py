"""A non-finite number in ``metrics.jsonl`` reads back as what it was (``storage.results.NONFINITE``), not as "not measured".

The files are strict JSON, so a NaN loss is written ``null``; ``null`` is also what "not measured" reads as, and
:func:`~chillfl.storage.results.summarize` skips it: a run whose last global loss overflowed was reported, after a
read-back, with an earlier round's finite loss as its final one. A line now names its non-finite values.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest

from chillfl.storage.results import NONFINITE, ResultWriter, decode_record, encode_record, read_metrics, summarize
from chillfl.storage.run_folder import _metrics_until

RECORDS = [
    {"round": 1, "clients": [0, 1], "global_acc": 0.5, "global_loss": 1.25, "local_acc": None, "agg_clp": False},  # agg_clp: a PA3Fed run, which the CLP plot needs
    {"round": 2, "clients": [0, 1], "global_acc": 0.6, "global_loss": math.nan, "val_loss": math.inf, "train_loss": -math.inf},
]


def test_a_non_finite_value_is_null_and_named_and_reads_back() -> None:
    line = json.dumps(encode_record(RECORDS[1]), sort_keys=True, allow_nan=False)
    assert json.loads(line) == {
        "round": 2,
        "clients": [0, 1],
        "global_acc": 0.6,
        "global_loss": None,
        "val_loss": None,
        "train_loss": None,
        NONFINITE: {"global_loss": "nan", "val_loss": "inf", "train_loss": "-inf"},
    }
    back = decode_record(json.loads(line))
    assert NONFINITE not in back and math.isnan(back["global_loss"]) and back["val_loss"] == math.inf and back["train_loss"] == -math.inf
    # a finite record's line is as it always was (no marker), and None ("not measured") stays None
    assert encode_record(RECORDS[0]) == RECORDS[0] and decode_record(dict(RECORDS[0])) == RECORDS[0]


def test_a_run_whose_last_loss_is_nan_reports_it_after_a_read_back(tmp_path: Path) -> None:
    # in memory: rounds 1.25, nan -> final nan, best 1.25 (round 1). Read back before the marker: round 2's null was
    # "not measured", so final = 1.25, round 1's, as if the loss had not overflowed.
    writer = ResultWriter(tmp_path, "run")
    for record in RECORDS:
        writer.append(record)
    folder = writer.finish()
    in_memory, read_back = summarize(RECORDS), summarize(read_metrics(folder))
    assert math.isnan(in_memory["final_global_loss"]) and math.isnan(read_back["final_global_loss"])
    assert read_back["best_global_loss"] == 1.25 and read_back["best_global_loss_round"] == 1
    assert "final_val_loss" not in read_back and "final_val_loss" not in in_memory  # never finite: no final or best, as in memory
    # the resume's reading (the metrics up to the checkpoint, by their checksum) decodes them too
    data = (folder / "metrics.jsonl").read_bytes()
    run = {"metrics_bytes": len(data), "metrics_sha256": hashlib.sha256(data).hexdigest()}
    prefix, records = _metrics_until(folder / "metrics.jsonl", run, 2, force=False)
    assert prefix == data and math.isnan(summarize(records)["final_global_loss"])
    # --force re-encodes what it read: the marker is kept
    forced, _ = _metrics_until(folder / "metrics.jsonl", {}, 2, force=True)
    assert forced == data


def test_an_older_file_without_the_marker_reads_as_before(tmp_path: Path) -> None:
    # an older chillfl wrote round 2's NaN loss as a bare null: it can only read as "not measured", final = round 1's 1.25
    lines = [{"round": 1, "global_loss": 1.25}, {"round": 2, "global_loss": None}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    records = read_metrics(tmp_path)
    assert records == lines and summarize(records)["final_global_loss"] == 1.25


@pytest.mark.parametrize("marker", [{"global_loss": "NaN"}, {"global_acc": "nan"}, {"missing": "inf"}, ["global_loss"]])
def test_a_marker_that_names_no_null_value_is_refused(marker: object) -> None:
    with pytest.raises(ValueError, match=NONFINITE):
        decode_record({"round": 1, "global_acc": 0.5, "global_loss": None, NONFINITE: marker})


def test_a_record_may_not_use_the_markers_key() -> None:
    with pytest.raises(ValueError, match=NONFINITE):
        encode_record({"round": 1, NONFINITE: 1.0})


def _write_nonfinite_run(folder: Path) -> Path:
    """A run folder whose metrics.jsonl holds RECORDS as the writer spells them (round 2: NaN loss, +inf, -inf)."""
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(encode_record(r), sort_keys=True, allow_nan=False) + "\n" for r in RECORDS))
    return folder


def _is_round_2(record: dict[str, object]) -> bool:
    """Round 2 of RECORDS as it was in memory: NaN, inf and -inf back, the marker gone, the finite values untouched."""
    loss, val, train = record["global_loss"], record["val_loss"], record["train_loss"]
    return (NONFINITE not in record and isinstance(loss, float) and math.isnan(loss) and val == math.inf and train == -math.inf
            and record["global_acc"] == 0.6)


def test_every_reader_of_metrics_jsonl_gives_the_non_finite_float_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """read_metrics (report, sweeps), the metrics tables' read_records and the PA3Fed curves' reading all go through the one
    decoder: round 2's loss is NaN (and the infinities inf), not None ("not measured")."""
    from chillfl.metrics.records import read_records

    run = _write_nonfinite_run(tmp_path / "compare" / "FedAvg")
    assert _is_round_2(read_metrics(run)[1]) and _is_round_2(read_records(run / "metrics.jsonl")[1])
    assert read_records(run / "metrics.jsonl")[0] == RECORDS[0]

    pytest.importorskip("matplotlib")
    import chillfl.plots.pa3fed as pa3fed

    seen: dict[str, list[dict[str, object]]] = {}

    def capture(curves: dict[str, list[dict[str, object]]], out: Path, title: str = "") -> bool:
        seen.update(curves)
        return True

    monkeypatch.setattr(pa3fed, "plot_compare_clp", capture)
    assert pa3fed.main([str(tmp_path / "compare")]) == 0
    assert list(seen) == ["FedAvg"] and _is_round_2(seen["FedAvg"][1])


def test_a_garbled_marker_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    """The metrics tables read the marker through the same decoder, so a hand-edited one is their usual ConfigError."""
    from chillfl.errors import ConfigError
    from chillfl.metrics.records import read_records

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"round": 1, "global_loss": 0.5, "nonfinite": {"global_loss": "nan"}}\n')
    with pytest.raises(ConfigError, match=r"line 1: 'nonfinite' must map keys whose value is null"):
        read_records(path)


def test_the_decoder_and_the_metrics_tables_import_no_torch() -> None:
    """The small ``python -m chillfl.metrics.*`` tables decode with :mod:`chillfl.storage.jsonl`, which needs no torch."""
    import subprocess
    import sys

    code = "import sys, chillfl.metrics.records, chillfl.storage.jsonl; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"

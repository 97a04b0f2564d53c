"""Metric sinks (CSV, TensorBoard, W&B offline): each is read back and compared with metrics.jsonl."""

from __future__ import annotations

import ast
import csv
import json
import struct
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chillfl.config import load_config
from chillfl.errors import ConfigError, MissingExtra
from chillfl.runner import run_experiment
from chillfl.sinks import CsvSink, scalars
from procs import InterruptAt

SRC = Path(__file__).resolve().parents[1] / "src" / "chillfl"

TINY = {
    "name": "sinks",
    "seed": 3,
    "federation.num_clients": 4,
    "federation.rounds": 3,
    "client.batch_size": 16,
    "client.lr": 0.05,
    "dataset": {"name": "synthetic", "num_clients": 4, "dim": 10, "num_classes": 3, "size_log_mean": 1.0, "size_log_sigma": 0.5, "min_samples": 20},
    "partition": {"name": "natural"},
    "model": {"name": "mlp"},
    "eval.client_split": "natural",
    "eval.every": 2,  # only round 2 is evaluated: its columns appear after the first row (the CSV is rewritten)
}


@pytest.fixture
def offline_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B's own settings and caches into tmp_path (the run itself is offline by the sink's settings)."""
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")


def test_scalars_flattens_one_level_and_drops_lists_and_none() -> None:
    record = {"round": 4, "global_acc": 0.5, "clients": [0, 1], "agg_clp": True, "local_acc": None, "client_train_loss": {"0": 1.5, "1": 2}, "inf": float("inf")}
    # round is the step, not a scalar; True -> 1.0; the list and None are left out (a non-finite value is kept: test_sinkfix_sinks.py).
    assert scalars(record) == {"global_acc": 0.5, "agg_clp": 1.0, "client_train_loss/0": 1.5, "client_train_loss/1": 2.0, "inf": float("inf")}


def test_csv_sink_writes_integers_as_integers(tmp_path: Path) -> None:
    """Byte counts, counts and flags were written as floats (``3.0``, a count past 2**53 rounded); floats keep their repr."""
    first = {"round": 1, "bytes_up": 3, "bytes_cumulative": 2**53 + 1, "agg_clp": True, "acc": 0.1 + 0.2, "loss": 2.0, "per": {"0": 7, "1": 0.5}}
    sink = CsvSink(tmp_path / "m.csv", records=[first])
    sink.on_round({"round": 2, "bytes_up": 0, "agg_clp": False, "acc": np.float64(1e-20), "new": 5})  # a new column: rewritten
    sink.on_round({"round": 3, "bytes_up": 12})  # appended
    rows = list(csv.reader((tmp_path / "m.csv").open(newline="")))
    assert rows == [["round", "acc", "agg_clp", "bytes_cumulative", "bytes_up", "loss", "new"],
                    ["1", "0.30000000000000004", "1", "9007199254740993", "3", "2.0", ""],
                    ["2", "1e-20", "0", "", "0", "", "5"],
                    ["3", "", "", "", "12", "", ""]]
    # a table's cells are lines of m_clients.csv (test_longfix_csv.py), integers as integers there too
    assert list(csv.reader((tmp_path / "m_clients.csv").open(newline=""))) == [["round", "key", "client", "value"], ["1", "per", "0", "7"], ["1", "per", "1", "0.5"]]


def test_csv_sink_adds_a_column_by_rewriting_the_file(tmp_path: Path) -> None:
    sink = CsvSink(tmp_path / "m.csv", records=[{"round": 1, "loss": 0.5}])
    sink.on_round({"round": 2, "loss": 0.25, "acc": 0.75})
    sink.on_round({"round": 3, "loss": 0.125})
    rows = list(csv.reader((tmp_path / "m.csv").open(newline="")))
    assert rows == [["round", "acc", "loss"], ["1", "", "0.5"], ["2", "0.75", "0.25"], ["3", "", "0.125"]]


def read_wandb_records(path: Path) -> list[Any]:
    """The protobuf records of a W&B ``.wandb`` file.

    The format is LevelDB's log format after a 7-byte header (``:W&B``, magic
    0xBEE1, version 0): 32 KiB blocks of chunks, each with a 7-byte header
    (CRC32C, little-endian uint16 length, type 1 full / 2 first / 3 middle /
    4 last); a block tail shorter than a header is padding.
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B" and data[4:6] == b"\xe1\xbe", data[:7]
    block, pos, out, pending = 32768, 7, [], b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # padding at the end of a block
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0 and length == 0:
            continue
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
            pending = b""
    return out


def test_csv_tensorboard_and_wandb_sinks_write_what_metrics_jsonl_holds(tmp_path: Path, offline_wandb: None) -> None:
    pytest.importorskip("tensorboard")  # the `test` extra installs both; a bare core install skips the read-back
    pytest.importorskip("wandb")
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    config = load_config(None, {**TINY, "out_dir": str(tmp_path / "results"), "log.sinks": ["csv", "tensorboard", "wandb"]})
    out = run_experiment(config, progress=False)
    assert out.folder == tmp_path / "results" / "sinks"
    folder = out.folder
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1, 2, 3]
    expected = {r["round"]: scalars(r) for r in records}
    assert "global_acc" in expected[2] and "global_acc" not in expected[1]
    assert not list(tmp_path.glob("results/*.partial"))

    # CSV: the csv module reads back every value exactly (floats are written as their repr); the tables' cells
    # (client_train_loss/<id>) are lines round,key,client,value of metrics_clients.csv.
    with (folder / "metrics.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [int(row["round"]) for row in rows] == [1, 2, 3]
    with (folder / "metrics_clients.csv").open(newline="", encoding="utf-8") as f:
        cells = list(csv.DictReader(f))
    for row in rows:
        got = {k: float(v) for k, v in row.items() if k != "round" and v != ""}
        got |= {f"{c['key']}/{c['client']}": float(c["value"]) for c in cells if c["round"] == row["round"]}
        assert got == expected[int(row["round"])]

    # TensorBoard: every scalar at step = round, stored as float32.
    events = list((folder / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    seen: dict[int, dict[str, float]] = {}
    for event in EventFileLoader(str(events[0])).Load():
        for value in event.summary.value:
            # add_scalar writes a float32 simple_value; the loader hands it back as a scalar float tensor
            number = value.simple_value if value.HasField("simple_value") else value.tensor.float_val[0]
            seen.setdefault(event.step, {})[value.tag] = number
    assert seen == {rnd: {k: float(np.float32(v)) for k, v in row.items()} for rnd, row in expected.items()}

    # W&B offline: the run's history records, read from its .wandb file, hold every scalar exactly at step = round.
    runs = list((folder / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    history: dict[int, dict[str, float]] = {}
    config_keys: set[str] = set()
    for record in read_wandb_records(runs[0]):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            step = int(record.history.step.num) if record.history.HasField("step") else int(items["_step"])
            history[step] = {k: float(v) for k, v in items.items() if not k.startswith("_")}
        elif kind == "config":
            config_keys |= {item.key for item in record.config.update}
        elif kind == "run":
            assert record.run.display_name == "sinks"
            config_keys |= {item.key for item in record.run.config.update}
    assert history == expected
    assert {"federation", "client", "log", "seed"} <= config_keys


def test_sinks_are_refused_with_one_line_in_the_config() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {"log.sinks": ["csv", "neptune"]})
    assert str(info.value) == "log.sinks: unknown value 'neptune'; allowed: csv, tensorboard, wandb, mlflow"
    with pytest.raises(ConfigError, match=r"^log.sinks: lists 'csv' twice$"):
        load_config(None, {"log.sinks": ["csv", "csv"]})
    with pytest.raises(ConfigError, match=r"^log.sinks: expected a list, got 'csv'$"):
        load_config(None, {"log.sinks": "csv"})


@pytest.mark.parametrize(("sink", "line"), [("tensorboard", 'tensorboard is needed for TensorBoard logs: pip install "chillfl[tensorboard]"'),
                                          ("wandb", 'wandb is needed for W&B logs: pip install "chillfl[wandb]"'),
                                          ("mlflow", 'mlflow is needed for MLflow logs: pip install "chillfl[mlflow]"')])
def test_a_missing_sink_package_stops_the_run_before_its_folder_exists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sink: str, line: str) -> None:
    monkeypatch.setitem(sys.modules, sink, None)  # import of a None entry raises ModuleNotFoundError, as if not installed
    config = load_config(None, {**TINY, "out_dir": str(tmp_path / "results"), "log.sinks": ["csv", sink]})
    with pytest.raises(MissingExtra) as info:
        run_experiment(config, progress=False)
    assert str(info.value) == line
    assert not (tmp_path / "results").exists()


def test_the_engine_imports_no_sink_code() -> None:
    for path in (SRC / "engine").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.startswith(("chillfl.sinks", "tensorboard", "wandb", "torch.utils.tensorboard")) for n in names), path



def test_a_resumed_run_continues_its_csv_and_tensorboard_logs(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from chillfl.runner import resume_experiment

    config = load_config(None, {**TINY, "federation.rounds": 5, "eval.every": 1, "checkpoint.every": 2, "out_dir": str(tmp_path), "log.sinks": ["csv", "tensorboard"]})
    with pytest.raises(KeyboardInterrupt):
        # The checkpoint is at round 2; the sinks have logged round 3 too; round 4 stops before they see it.
        run_experiment(config, progress=False, callbacks=[InterruptAt(4)])
    partial = tmp_path / "sinks.partial"
    assert [int(r["round"]) for r in csv.DictReader((partial / "metrics.csv").open(newline=""))] == [1, 2, 3]
    out = resume_experiment(partial, progress=False)
    assert out.folder is not None
    records = [json.loads(line) for line in (out.folder / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [1, 2, 3, 4, 5]
    with (out.folder / "metrics.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    with (out.folder / "metrics_clients.csv").open(newline="", encoding="utf-8") as f:
        cells = list(csv.DictReader(f))
    assert [{k: float(v) for k, v in row.items() if k != "round" and v != ""} | {f"{c['key']}/{c['client']}": float(c["value"]) for c in cells if c["round"] == row["round"]}
            for row in rows] == [scalars(r) for r in records]
    # Two event files (before and after the resume); TensorBoard's reader shows each round once: the
    # resumed writer's purge_step drops the first file's round 3, which the resumed run trains again.
    assert len(list((out.folder / "tensorboard").glob("events.out.tfevents.*"))) == 2
    acc = EventAccumulator(str(out.folder / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("global_acc")] == [(r["round"], float(np.float32(r["global_acc"]))) for r in records]


def test_sinks_from_python_through_chillfl_run(tmp_path: Path) -> None:
    import chillfl

    config = {k: v for k, v in TINY.items() if "." not in k}
    dotted = {k: v for k, v in TINY.items() if "." in k}
    result = chillfl.run(config=config, out_dir=str(tmp_path), progress=False, **dotted, **{"log.sinks": ["csv"]})
    folder = tmp_path / "sinks"
    rows = list(csv.DictReader((folder / "metrics.csv").open(newline="")))
    assert [int(r["round"]) for r in rows] == [r["round"] for r in result.records] == [1, 2, 3]


def test_an_interrupted_run_logging_to_wandb_resumes(tmp_path: Path, offline_wandb: None) -> None:
    """W&B makes links of its own in the run's ``wandb/`` (``latest-run``, ``debug.log``): ``chillfl resume`` refused every
    interrupted run with the wandb sink ("wandb/latest-run is a symbolic link"), and a comparison with it too."""
    pytest.importorskip("wandb")
    from chillfl.runner import resume_experiment

    config = load_config(None, {**TINY, "federation.rounds": 4, "checkpoint.every": 2, "out_dir": str(tmp_path / "results"), "log.sinks": ["wandb"]})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, callbacks=[InterruptAt(3)])
    partial = tmp_path / "results" / "sinks.partial"
    assert any(p.is_symlink() for p in (partial / "wandb").iterdir())  # what W&B writes there, not chillfl
    out = resume_experiment(partial, progress=False)
    assert out.folder == tmp_path / "results" / "sinks"
    assert [json.loads(line)["round"] for line in (out.folder / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    assert len(list((out.folder / "wandb").glob("offline-run-*"))) == 2  # the run before and after the resume


def test_links_are_still_refused_beside_and_instead_of_wandbs_folder(tmp_path: Path) -> None:
    """Only the inside of a ``wandb/`` folder is W&B's; a link elsewhere in a run or comparison folder, or a ``wandb``
    that is itself a link, is still refused."""
    from chillfl.storage.results import refuse_links

    run = tmp_path / "cmp" / "run-s0"
    (run / "wandb" / "offline-run-1").mkdir(parents=True)
    (run / "wandb" / "latest-run").symlink_to("offline-run-1")
    refuse_links(tmp_path / "cmp")
    (run / "metrics.csv").symlink_to(tmp_path / "elsewhere.csv")
    with pytest.raises(ConfigError, match="metrics.csv is a symbolic link"):
        refuse_links(tmp_path / "cmp")
    (run / "metrics.csv").unlink()
    other = tmp_path / "other"
    other.mkdir()
    (run / "wandb").rename(tmp_path / "w")
    (run / "wandb").symlink_to(other)
    with pytest.raises(ConfigError, match="wandb is a symbolic link"):
        refuse_links(tmp_path / "cmp")

"""Metric sinks after a resume, an interruption and in a comparison; non-finite values; W&B offline, MLflow on sqlite in tmp.

Each sink is read back: W&B's offline ``.wandb`` file (:func:`test_sinks.read_wandb_records`), MLflow's sqlite
store through its client, TensorBoard's event file, the CSV file. Nothing reaches the network.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from chillfl.config import load_config
from chillfl.runner import resume_experiment, run_experiment
from chillfl.sinks import CsvSink, scalars
from procs import InterruptAt
from test_sinks import TINY, read_wandb_records

INF, NAN = float("inf"), float("nan")


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """W&B offline with its settings and caches in tmp_path; an MLflow sqlite store in tmp_path (its URI). The current
    folder is tmp_path: a sqlite store's artefacts go to ``./mlruns`` of the folder its experiment was created in."""
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home" / var.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    if "wandb" in sys.modules:  # W&B's process-wide service and settings from an earlier test: each test starts its own
        sys.modules["wandb"].teardown()
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def wandb_runs(folder: Path, runs: int | None = None) -> list[list[Any]]:
    """The records of each offline W&B run under ``folder/wandb``, oldest first (by start time: two runs started in the
    same second had their folders in random order), once each file holds its run's exit
    record (``runs``: once that many files exist). W&B's service may still hold a finished run's last records in its
    file writer's buffer: its teardown flushes them (a later ``wandb.init`` starts it again), and on a loaded machine
    the writer can still be at it after: read again, for up to a minute (a wait, not a timing assertion)."""
    import time

    import wandb

    wandb.teardown()
    deadline = time.monotonic() + 60
    while True:
        found = [read_wandb_records(path) for path in folder.glob("wandb/offline-run-*/run-*.wandb")]
        complete = (runs is None or len(found) >= runs) and all(any(r.WhichOneof("record_type") == "exit" for r in run) for run in found)
        if complete or time.monotonic() > deadline:  # oldest first by their start: a folder's name has whole seconds, then a random id
            return sorted(found, key=lambda run: of_kind(run, "run").start_time.ToNanoseconds())
        time.sleep(0.5)


def history(records: list[Any]) -> dict[int, dict[str, float]]:
    """A W&B run's logged scalars by step (W&B's own ``_step``, ``_runtime``, ... left out)."""
    out: dict[int, dict[str, float]] = {}
    for record in records:
        if record.WhichOneof("record_type") == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            out[int(items["_step"])] = {k: float(v) for k, v in items.items() if not k.startswith("_")}
    return out


def of_kind(records: list[Any], kind: str) -> Any:
    (found,) = [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]
    return found


def jsonl(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def interrupted_then_resumed(tmp_path: Path, sinks: list[str], uri: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict[int, dict[str, float]]]:
    """A 5-round run stopped in round 4 (checkpoint at 2; the sinks saw round 3 too) with its MLflow run left open, as a
    SIGKILL leaves it, then resumed: the finished folder and its scalars by round, as metrics.jsonl holds them."""
    from chillfl.sinks import MlflowSink

    config = load_config(None, {**TINY, "federation.rounds": 5, "eval.every": 1, "checkpoint.every": 2, "out_dir": str(tmp_path / "results"),
                                "log.sinks": sinks, "log.mlflow_tracking_uri": uri})
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        m.setattr(MlflowSink, "close", lambda self, failure=None: None)  # as a SIGKILL: nothing ends the MLflow run
        run_experiment(config, progress=False, callbacks=[InterruptAt(4)])
    out = resume_experiment(tmp_path / "results" / "sinks.partial", progress=False)
    assert out.folder == (tmp_path / "results" / "sinks").resolve()
    expected = {r["round"]: scalars(r) for r in jsonl(out.folder)}
    assert list(expected) == [1, 2, 3, 4, 5]
    return out.folder, expected


def test_a_resumed_wandb_run_holds_every_round(tmp_path: Path, offline: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a hard kill the earlier W&B run could hold no round (W&B's service had them buffered), and the resumed one
    held only the rounds after the checkpoint: now it logs those up to the checkpoint, read back from metrics.jsonl, first."""
    pytest.importorskip("wandb")
    folder, expected = interrupted_then_resumed(tmp_path, ["wandb"], offline, monkeypatch)
    before, after = wandb_runs(folder, runs=2)
    assert history(after) == expected  # rounds 1 and 2 read back, 3 to 5 run again
    assert of_kind(before, "exit").exit_code == 1


def test_a_resumed_mlflow_run_holds_every_round_and_ends_the_killed_one(tmp_path: Path, offline: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The earlier MLflow run of a hard-killed run stayed RUNNING for ever, and the resumed one held only the rounds after
    the checkpoint: now the stale run (found by its folder tag) is KILLED and the resumed one holds every round."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    folder, expected = interrupted_then_resumed(tmp_path, ["mlflow"], offline, monkeypatch)
    client = MlflowClient(tracking_uri=offline)
    experiment = client.get_experiment_by_name("chillfl")
    assert experiment is not None
    runs = {r.data.tags.get("chillfl.resumed_at"): r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs, key=str) == ["2", None]
    assert runs[None].info.status == "KILLED" and runs["2"].info.status == "FINISHED"
    assert runs["2"].data.tags["chillfl.folder"] == runs[None].data.tags["chillfl.folder"] == str(folder)  # the final folder, not sinks.partial
    resumed = runs["2"].info.run_id
    for key in ("global_acc", "train_loss", "bytes_up"):
        assert [(m.step, m.value) for m in sorted(client.get_metric_history(resumed, key), key=lambda m: m.step)] == [(r, expected[r][key]) for r in expected]


def test_wandb_marks_an_interrupted_run_failed_and_a_finished_one_not(tmp_path: Path, offline: str) -> None:
    """W&B's run was finished with exit code 0 whatever ended it (MLflow's was KILLED or FAILED)."""
    pytest.importorskip("wandb")
    config = load_config(None, {**TINY, "checkpoint.every": 1, "out_dir": str(tmp_path / "results"), "log.sinks": ["wandb"]})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, callbacks=[InterruptAt(2)])
    (stopped,) = wandb_runs(tmp_path / "results" / "sinks.partial")
    assert of_kind(stopped, "exit").exit_code == 1
    out = run_experiment(config.with_overrides({"name": "done"}), progress=False)
    assert out.folder is not None
    (finished,) = wandb_runs(out.folder)
    assert of_kind(finished, "exit").exit_code == 0


def test_a_run_that_finishes_inside_an_except_block_is_finished_in_wandb_and_mlflow(tmp_path: Path, offline: str) -> None:
    """A retry inside ``except`` (``try: run(lr=1) except Diverged: run(lr=0.1)``): the sinks read sys.exc_info(), the
    caller's handled exception, and marked the completed run FAILED (MLflow) and exit code 1 (W&B)."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    config = load_config(None, {**TINY, "out_dir": str(tmp_path / "results"), "log.sinks": ["wandb", "mlflow"], "log.mlflow_tracking_uri": offline})
    try:
        raise ValueError("a failed first attempt")
    except ValueError:
        out = run_experiment(config, progress=False)
    assert out.folder is not None
    (logged,) = wandb_runs(out.folder)
    assert of_kind(logged, "exit").exit_code == 0
    experiment = MlflowClient(tracking_uri=offline).get_experiment_by_name("chillfl")
    (run,) = MlflowClient(tracking_uri=offline).search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"


def test_a_diverged_run_fails_in_wandb_and_mlflow_tags_its_failed_folder(tmp_path: Path, offline: str) -> None:
    """W&B's run of a diverged run was finished with exit code 0; MLflow's ``chillfl.folder`` named ``sinks.partial``,
    renamed ``sinks.failed`` (before the sinks close)."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from chillfl.errors import Diverged

    config = load_config(None, {**TINY, "client.lr": 1e6, "strict": True, "out_dir": str(tmp_path / "results"), "log.sinks": ["wandb", "mlflow"],
                                "log.mlflow_tracking_uri": offline})
    with pytest.raises(Diverged):
        run_experiment(config, progress=False)
    failed = (tmp_path / "results" / "sinks.failed").resolve()
    (logged,) = wandb_runs(failed)
    assert of_kind(logged, "exit").exit_code == 1
    experiment = MlflowClient(tracking_uri=offline).get_experiment_by_name("chillfl")
    assert experiment is not None
    (run,) = MlflowClient(tracking_uri=offline).search_runs([experiment.experiment_id])
    assert run.info.status == "FAILED" and run.data.tags["chillfl.folder"] == str(failed)


def test_an_offline_wandb_run_prints_no_url_warning(tmp_path: Path, offline: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading ``run.url`` of an offline run printed ``wandb: WARNING URL not available in offline run`` every run
    (W&B's warnings are recorded here: whether they print depends on ``WANDB_SILENT`` as W&B first read it in the process)."""
    wandb = pytest.importorskip("wandb")
    from chillfl.sinks import WandbSink

    warned: list[str] = []
    monkeypatch.setattr(wandb, "termwarn", lambda message, *args, **kwargs: warned.append(str(message)))
    WandbSink(tmp_path, "quiet", {}).close()
    assert not [w for w in warned if "URL" in w]


def test_non_finite_values_are_logged_not_dropped(tmp_path: Path) -> None:
    """An overflowed loss (inf) or a NaN vanished from every sink, as if it had not been measured."""
    record = {"round": 1, "global_loss": INF, "drift": -INF, "train_loss": NAN, "global_acc": 0.5, "client_train_loss": {"0": NAN, "1": 2.0}}
    got = scalars(record)
    assert set(got) == {"global_loss", "drift", "train_loss", "global_acc", "client_train_loss/0", "client_train_loss/1"}
    assert got["global_loss"] == INF and got["drift"] == -INF and math.isnan(got["train_loss"]) and math.isnan(got["client_train_loss/0"])
    CsvSink(tmp_path / "m.csv", [record])
    rows = list(csv.reader((tmp_path / "m.csv").open(newline="")))
    assert rows == [["round", "drift", "global_acc", "global_loss", "train_loss"], ["1", "-inf", "0.5", "inf", "nan"]]
    cells = list(csv.reader((tmp_path / "m_clients.csv").open(newline="")))  # the tables: long-format beside it
    # a table's NaN has no line: metrics.jsonl keeps it as null, and a resumed run reading it back wrote none (rev104a 3)
    assert cells == [["round", "key", "client", "value"], ["1", "client_train_loss", "1", "2.0"]]


NON_FINITE = {"round": 1, "global_loss": INF, "drift": -INF, "train_loss": NAN, "global_acc": 0.5}


def test_non_finite_values_reach_tensorboard_wandb_and_mlflow(tmp_path: Path, offline: str) -> None:
    """Each backend takes them; MLflow's SQL store keeps an infinity as +-1.7976931348623157e308 (its largest float)."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from chillfl.sinks import MlflowSink, TensorBoardSink, WandbSink

    tensorboard, wandb, mlflow = TensorBoardSink(tmp_path / "tb"), WandbSink(tmp_path, "nf", {}), MlflowSink(tmp_path, "nf", {}, tracking_uri=offline)
    for sink in (tensorboard, wandb, mlflow):
        sink.on_round(NON_FINITE)
        sink.close()

    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    board = {tag: acc.Scalars(tag)[0].value for tag in acc.Tags()["scalars"]}
    assert set(board) == {"global_loss", "drift", "train_loss", "global_acc"}
    assert board["global_loss"] == INF and board["drift"] == -INF and math.isnan(board["train_loss"])

    (run,) = wandb_runs(tmp_path)
    logged = history(run)[1]
    assert logged["global_loss"] == INF and logged["drift"] == -INF and math.isnan(logged["train_loss"]) and logged["global_acc"] == 0.5

    metrics = {k: [m.value for m in mlflow.client.get_metric_history(mlflow.run_id, k)] for k in ("global_loss", "drift", "train_loss")}
    assert metrics["global_loss"] == [sys.float_info.max] and metrics["drift"] == [-sys.float_info.max] and math.isnan(metrics["train_loss"][0])


def test_a_comparisons_runs_are_grouped_and_tagged_with_their_final_folders(tmp_path: Path, offline: str) -> None:
    """MLflow's ``chillfl.folder`` named ``NAME-compare.partial/RUN.partial``, gone once the comparison finished, and
    nothing told two comparisons' runs apart in one W&B project or MLflow experiment."""
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from chillfl.sweeps.run import run_compare

    config = load_config(None, {**TINY, "federation.rounds": 1, "eval.every": 1, "out_dir": str(tmp_path / "results"),
                                "log.sinks": ["wandb", "mlflow"], "log.mlflow_tracking_uri": offline})
    result = run_compare(config, ["client.lr=0.05,0.1"], progress=False)
    assert result.folder is not None and result.folder.name == "sinks-compare"
    client = MlflowClient(tracking_uri=offline)
    experiment = client.get_experiment_by_name("chillfl")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2
    for run in runs:
        folder = Path(run.data.tags["chillfl.folder"])
        assert folder.parent == result.folder.resolve() and (folder / "metrics.jsonl").is_file()
        label = "sinks-compare@" + hashlib.sha256(str(result.folder.resolve().parent).encode()).hexdigest()[:8]  # its out_dir's hash
        assert run.data.tags["chillfl.comparison"] == label
        (logged,) = wandb_runs(folder)
        assert of_kind(logged, "run").run_group == label


def test_a_plain_runs_wandb_run_has_no_group(tmp_path: Path, offline: str) -> None:
    pytest.importorskip("wandb")
    from chillfl.sinks import WandbSink

    WandbSink(tmp_path / "x.partial", "x", {}).close()
    (run,) = wandb_runs(tmp_path / "x.partial")
    assert of_kind(run, "run").run_group == ""

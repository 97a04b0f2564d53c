"""Sinks after a resume, a rename at the end and a comparison that failed: TensorBoard's read-back rounds, MLflow's folder
tags and stale runs, W&B's offline line. TensorBoard's event files, MLflow's sqlite store in tmp_path and W&B's offline
files are read back; nothing reaches the network."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chillfl.config import load_config
from chillfl.runner import resume_experiment, run_experiment
from chillfl.sinks import NOT_ARTIFACTS, TensorBoardSink, scalars
from procs import InterruptAt
from test_sinkfix_sinks import interrupted_then_resumed, jsonl, offline  # noqa: F401  (a fixture)
from test_sinks import TINY


def store(tmp_path: Path) -> str:
    """The MLflow store the ``offline`` fixture (test_sinkfix_sinks.py) points at: sqlite in tmp_path."""
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def event_steps(path: Path) -> dict[str, list[int]]:
    """The steps of each scalar tag in one event file, as written (no purge applied)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps: dict[str, list[int]] = {}
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            steps.setdefault(value.tag, []).append(event.step)
    return steps


@pytest.mark.parametrize("kept", [(), (1,), (1, 2, 3)], ids=["none-flushed", "round-1-flushed", "all-flushed"])
def test_a_resumed_tensorboard_log_holds_every_round_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kept: tuple[int, ...]) -> None:
    """A hard kill loses the rounds TensorBoard's writer had buffered, rounds before the checkpoint too: the resumed
    writer only purged the steps after the checkpoint, so those rounds were missing for good (W&B and MLflow log the
    read-back rounds again). Now the rounds the earlier event file lacks are written again, and only those."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    config = load_config(None, {**TINY, "federation.rounds": 5, "eval.every": 1, "checkpoint.every": 2, "out_dir": str(tmp_path), "log.sinks": ["tensorboard"]})
    written = TensorBoardSink.on_round
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        # The checkpoint is at round 2, the sink saw round 3 too; of those, only `kept` reached the file before the kill.
        m.setattr(TensorBoardSink, "on_round", lambda self, record: written(self, record) if record["round"] in kept else None)
        run_experiment(config, progress=False, callbacks=[InterruptAt(4)])
    (first,) = (tmp_path / "sinks.partial" / "tensorboard").glob("events.out.tfevents.*")
    # TensorBoard reads a folder's event files in name order (opening time, in seconds): the resume below may open its
    # file in the same second, so the earlier file is named as opened long before.
    parts = first.name.split(".")  # events.out.tfevents.<seconds>.<host>.<pid>.<n>
    first.rename(first.with_name(".".join([*parts[:3], "0000000001", *parts[4:]])))
    out = resume_experiment(tmp_path / "sinks.partial", progress=False)
    assert out.folder is not None
    records = jsonl(out.folder)
    assert [r["round"] for r in records] == [1, 2, 3, 4, 5]

    files = sorted((out.folder / "tensorboard").glob("events.out.tfevents.*"))
    assert len(files) == 2
    acc = EventAccumulator(str(out.folder / "tensorboard"), size_guidance={SCALARS: 0})
    acc.Reload()
    for key in scalars(records[0]):
        assert [(e.step, e.value) for e in acc.Scalars(key)] == [(r["round"], float(np.float32(scalars(r)[key]))) for r in records], key
    rewritten = [r for r in (1, 2) if r not in kept]  # the rounds up to the checkpoint the first file lacks
    assert set(event_steps(files[1])["train_loss"]) == {*rewritten, 3, 4, 5}  # nothing the first file holds whole twice


def test_tensorboard_writes_again_from_a_round_it_holds_only_in_part(tmp_path: Path) -> None:
    """A round whose scalars were only partly flushed is written again whole, from that round on (the purge drops the part)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

    records = [{"round": r, "loss": 1.0 / r, "acc": r / 10} for r in (1, 2, 3)]
    first = TensorBoardSink(tmp_path)
    first.on_round(records[0])
    first.writer.add_scalar("loss", 0.5, global_step=2)  # round 2's loss reached the file, its acc did not
    first.close()
    resumed = TensorBoardSink(tmp_path, 3, records)
    resumed.close()
    acc = EventAccumulator(str(tmp_path), size_guidance={SCALARS: 0})
    acc.Reload()
    for key in ("loss", "acc"):
        assert [(e.step, e.value) for e in acc.Scalars(key)] == [(r["round"], float(np.float32(r[key]))) for r in records]


def test_tensorboard_files_it_cannot_read_are_written_again_whole(tmp_path: Path) -> None:
    """An unreadable event file is no reason to stop the run: every read-back round is written again."""
    pytest.importorskip("tensorboard")
    (tmp_path / "events.out.tfevents.0000000001.x").write_bytes(b"\x00" * 5)  # torn in its first record's header
    records: list[Mapping[str, Any]] = [{"round": 1, "loss": 1.0}, {"round": 2, "loss": 0.5}]
    TensorBoardSink(tmp_path, 2, records).close()
    (written,) = [p for p in tmp_path.glob("events.out.tfevents.*") if not p.name.endswith(".x")]
    assert event_steps(written) == {"loss": [1, 2]}


@pytest.mark.usefixtures("offline")
def test_a_comparison_that_failed_tags_its_mlflow_runs_with_the_failed_folder(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Every run diverged: the comparison's folder became ``sinks-compare.failed``, but MLflow's tags still named
    ``sinks-compare/...`` (guessed at each run's start) and W&B's offline line the same."""
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from mlflow.tracking import MlflowClient

    from chillfl.errors import SweepFailed
    from chillfl.sweeps.run import run_compare

    config = load_config(None, {**TINY, "federation.rounds": 1, "client.lr": 1e6, "strict": True, "out_dir": str(tmp_path / "results"),
                                "log.sinks": ["mlflow", "wandb"], "log.mlflow_tracking_uri": store(tmp_path)})
    with caplog.at_level(logging.INFO, logger="chillfl"), pytest.raises(SweepFailed):
        run_compare(config, ["client.lr=1e6,2e6"], progress=False)
    failed = (tmp_path / "results" / "sinks-compare.failed").resolve()
    assert failed.is_dir()
    client = MlflowClient(tracking_uri=store(tmp_path))
    experiment = client.get_experiment_by_name("chillfl")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2
    for run in runs:
        folder = Path(run.data.tags["chillfl.folder"])
        assert folder.parent == failed and folder.name.endswith(".failed") and (folder / "failure.json").is_file()
        assert run.data.tags["chillfl.comparison"] == "sinks-compare.failed@" + hashlib.sha256(str(failed.parent).encode()).hexdigest()[:8]  # its out_dir's hash
        assert run.info.status == "FAILED"
    said = [r.getMessage() for r in caplog.records if "wandb sync" in r.getMessage()]
    assert said[-1] == f"W&B's offline runs of the comparison are under {failed}: `wandb sync {failed}/*/wandb/offline-run-*` uploads them"


@pytest.mark.usefixtures("offline")
def test_a_run_renamed_at_its_end_is_tagged_with_the_folder_it_got(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``results/sinks`` appeared while the run ran (another run of the name finished): the run ended in ``sinks-2``, and
    MLflow's tag and W&B's offline line named ``sinks``, another run's folder."""
    pytest.importorskip("mlflow")
    pytest.importorskip("wandb")
    from mlflow.tracking import MlflowClient

    taken = tmp_path / "results" / "sinks"

    class TakeTheName:
        def on_round(self, record: Mapping[str, Any]) -> None:
            taken.mkdir(exist_ok=True)

        def on_end(self, output: Any) -> None:
            pass

    config = load_config(None, {**TINY, "out_dir": str(tmp_path / "results"), "log.sinks": ["mlflow", "wandb"], "log.mlflow_tracking_uri": store(tmp_path)})
    with caplog.at_level(logging.INFO, logger="chillfl"):
        out = run_experiment(config, progress=False, callbacks=[TakeTheName()])
    assert out.folder is not None and out.folder.name == "sinks-2"
    client = MlflowClient(tracking_uri=store(tmp_path))
    experiment = client.get_experiment_by_name("chillfl")
    assert experiment is not None
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.data.tags["chillfl.folder"] == str(out.folder.resolve())
    final = out.folder.resolve() / "wandb"
    said = [r.getMessage() for r in caplog.records if "wandb sync" in r.getMessage()]
    assert said[-1] == f"W&B's offline run is in {final}, not under {taken.resolve()}: `wandb sync {final}/offline-run-*` uploads it"


@pytest.mark.usefixtures("offline")
def test_a_resume_kills_only_its_own_stale_mlflow_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stale runs were found by the folder's path alone: another machine's live run of a folder at the same path,
    logging to the same MLflow server, was set KILLED by this machine's resume. Now the folder records its own MLflow
    runs (``mlflow-runs.json``) and only those are ended; each run is tagged with its host."""
    pytest.importorskip("mlflow")
    import socket

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store(tmp_path))
    experiment_id = client.create_experiment("chillfl")
    final = (tmp_path / "results" / "sinks").resolve()
    elsewhere = client.create_run(experiment_id, run_name="sinks", tags={"chillfl.folder": str(final), "chillfl.host": "another-host"}).info.run_id
    folder, _ = interrupted_then_resumed(tmp_path, ["mlflow"], store(tmp_path), monkeypatch)
    runs = {r.info.run_id: r for r in client.search_runs([experiment_id])}
    assert runs.pop(elsewhere).info.status == "RUNNING"  # the other machine's: left alone
    killed, resumed = sorted(runs.values(), key=lambda r: "chillfl.resumed_at" in r.data.tags)  # the interrupted one, then its resume
    assert killed.info.status == "KILLED" and resumed.info.status == "FINISHED"
    assert killed.data.tags["chillfl.host"] == resumed.data.tags["chillfl.host"] == socket.gethostname()
    from chillfl.sinks import MLFLOW_RUNS, read_mlflow_runs

    assert [r.run_id for r in read_mlflow_runs(folder) or []] == [killed.info.run_id, resumed.info.run_id]
    assert MLFLOW_RUNS in NOT_ARTIFACTS
    assert MLFLOW_RUNS not in {a.path for a in client.list_artifacts(resumed.info.run_id)}


@pytest.mark.usefixtures("offline")
def test_a_folder_without_its_mlflow_record_kills_untagged_runs_of_its_path(tmp_path: Path) -> None:
    """A folder interrupted under an older chillfl (no ``mlflow-runs.json``, runs without a host tag): its RUNNING runs are
    still found by path; a run tagged with a host is always in its folder's record, so it is not matched by path."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from chillfl.sinks import MlflowSink

    folder = tmp_path / "sinks.partial"
    folder.mkdir()
    final = str((tmp_path / "sinks").resolve())
    client = MlflowClient(tracking_uri=store(tmp_path))
    experiment_id = client.create_experiment("chillfl")
    older = client.create_run(experiment_id, tags={"chillfl.folder": final}).info.run_id
    hosted = client.create_run(experiment_id, tags={"chillfl.folder": final, "chillfl.host": "another-host"}).info.run_id
    MlflowSink(folder, "sinks", {}, tracking_uri=store(tmp_path), start=2).close()
    assert client.get_run(older).info.status == "KILLED"
    assert client.get_run(hosted).info.status == "RUNNING"

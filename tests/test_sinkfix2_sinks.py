"""Sinks after a resume: TensorBoard's read-back rounds. Its event files are read back; nothing reaches the network."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chillfl.config import load_config
from chillfl.runner import resume_experiment, run_experiment
from chillfl.sinks import TensorBoardSink, scalars
from procs import InterruptAt
from test_sinkfix_sinks import jsonl
from test_sinks import TINY


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

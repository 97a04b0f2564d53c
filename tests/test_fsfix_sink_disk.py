"""A full disk while a metric sink writes (``metrics.csv``, TensorBoard's event files) is the one line chillfl's own
files give (exit 1, naming the file and the checkpoint kept), not a traceback; the folder stays resumable.

The disk is simulated: ``Path.open`` (the CSV sink) or TensorBoard's record writer raises ``OSError(ENOSPC)``."""

from __future__ import annotations

import errno
import json
import os
import pathlib
import threading
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.runner import CHECKPOINT
from chillfl.sinks import CSV_FILE, TENSORBOARD_DIR
from test_damaged_files import TINY

ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _config(tmp_path: Path, name: str, sinks: list[str], rounds: int = 3) -> Path:
    """A tiny run's config file (dotted keys: TOML tables) writing ``NAME`` under ``tmp_path / "out"``."""
    options = {**TINY, "name": name, "out_dir": str(tmp_path / "out"), "log.sinks": sinks, "federation.rounds": rounds}
    path = tmp_path / f"{name}.toml"
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in options.items()))
    return path


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)


def test_a_full_disk_while_the_csv_sink_writes_is_one_line_and_the_run_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The 3rd write of metrics.csv (round 2's row) meets a full disk: a traceback ending in ``OSError: [Errno 28]``
    before; now one line saying that round 1's checkpoint is kept, and the resume writes what a clean run writes."""
    real = pathlib.Path.open
    opened: list[str] = []

    def full(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if self.name == CSV_FILE and mode[0] in "wa":
            opened.append(mode)
            if len(opened) == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, mode, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(pathlib.Path, "open", full)
        assert main(["run", "-q", str(_config(tmp_path, "full", ["csv"]))]) == 1
    folder = tmp_path / "out" / "full.partial"
    err = capsys.readouterr().err
    assert err.startswith(f"chillfl: error: cannot write {folder / CSV_FILE}: no space left on the device; the checkpoint of round 1 is kept: "
                          "free space, then chillfl resume "), err
    assert len(err.splitlines()) == 1 and (folder / CHECKPOINT).is_file()

    assert main(["resume", "-q", str(folder)]) == 0
    assert main(["run", "-q", str(_config(tmp_path, "clean", ["csv"]))]) == 0
    assert (tmp_path / "out" / "full" / CSV_FILE).read_bytes() == (tmp_path / "out" / "clean" / CSV_FILE).read_bytes()


@pytest.fixture
def full_tensorboard(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """TensorBoard's record writer (run in its writer thread) fails with ENOSPC once the event is set."""
    pytest.importorskip("tensorboard")
    from tensorboard.summary.writer.record_writer import RecordWriter

    full = threading.Event()
    real = RecordWriter.write

    def write(self: Any, data: bytes) -> None:
        if full.is_set():
            raise ENOSPC
        real(self, data)

    monkeypatch.setattr(RecordWriter, "write", write)
    return full


def test_a_full_disk_when_tensorboard_starts_is_one_line(tmp_path: Path, full_tensorboard: threading.Event,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The writer's first write (in its constructor) meets a full disk: 72 lines before, ``Exception in thread ...``
    with the writer thread's traceback and then the run's; now one line naming the folder, exit 1."""
    full_tensorboard.set()
    hook = threading.excepthook
    assert main(["run", "-q", str(_config(tmp_path, "tb", ["tensorboard"]))]) == 1
    folder = tmp_path / "out" / "tb.partial"
    err = capsys.readouterr().err
    assert err == f"chillfl: error: cannot write {folder / TENSORBOARD_DIR}: no space left on the device; no checkpoint was written yet; partial results in {folder}\n"
    assert threading.excepthook == hook  # the sink's filter of its writer thread's errors taken off again


class FillAt:
    """A run callback that fills the disk (sets ``full``) at round ``at``, before the sinks (after it) log that round."""

    def __init__(self, full: threading.Event, at: int) -> None:
        self.full, self.at = full, at

    def on_round(self, record: dict[str, Any]) -> None:
        if record["round"] == self.at:
            self.full.set()

    def on_end(self, output: object) -> None:
        pass


def test_a_full_disk_while_tensorboard_writes_keeps_the_checkpoint(tmp_path: Path, full_tensorboard: threading.Event) -> None:
    """Mid-run (from round 2 on): the error the writer thread met comes out of the sink, at a round or at its close, as
    the StorageError whose line names the checkpoint kept; the run folder stays a resumable ``.partial``."""
    from chillfl.config import load_config
    from chillfl.errors import StorageError
    from chillfl.runner import resume_experiment, run_experiment

    config = load_config(None, {**TINY, "name": "mid", "out_dir": str(tmp_path), "log.sinks": ["tensorboard"], "federation.rounds": 3})
    with pytest.raises(StorageError) as caught:
        run_experiment(config, progress=False, callbacks=[FillAt(full_tensorboard, 2)])
    folder = tmp_path / "mid.partial"
    line = str(caught.value)
    assert line.startswith(f"cannot write {folder / TENSORBOARD_DIR}: no space left on the device; the checkpoint of round "), line
    assert "free space, then chillfl resume" in line and (folder / CHECKPOINT).is_file()
    full_tensorboard.clear()
    out = resume_experiment(folder, progress=False)
    assert out.folder == tmp_path / "mid"

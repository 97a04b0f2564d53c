"""A metric sink's output in a run folder that is something else (a FIFO or a directory ``metrics.csv``, a file or FIFO
``tensorboard``, ...): ``chillfl resume`` refuses it in one line naming it (exit 2), before anything opens it.

Before: a FIFO ``metrics.csv`` blocked the resume in ``open`` for good (SIGINT and SIGTERM did not end it); a directory
there, or a file at ``tensorboard``, was a traceback once the sinks started. Each case below holds the FIFO's read end
open, so code that opens it for writing (the old code) goes on and fails the test rather than hangs it."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Callable

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.runner import CHECKPOINT, run_experiment
from chillfl.sinks import CLIENTS_CSV_FILE, CSV_FILE, MLFLOW_RUNS, TENSORBOARD_DIR
from resume_cases import Crash, _CrashIn
from test_damaged_files import TINY
from test_fsfix_wording import needs_fifo



@pytest.fixture
def cut_with_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run with the csv sink stopped after round 1's checkpoint (as by kill -9 in round 2): its ``NAME.partial``."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    config = load_config(None, {**TINY, "name": "cut", "out_dir": str(tmp_path), "log.sinks": ["csv"]})
    with pytest.raises(Crash):
        run_experiment(config, progress=False, callbacks=[_CrashIn(2)])
    folder = tmp_path / "cut.partial"
    assert (folder / CHECKPOINT).is_file() and (folder / CSV_FILE).is_file() and (folder / CLIENTS_CSV_FILE).is_file()
    return folder


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.mkdir()


def _file(path: Path) -> None:
    path.write_text("not a folder\n")


CASES: list[tuple[str, Callable[[Path], None], str]] = [
    (CSV_FILE, _fifo, "a FIFO"),
    (CSV_FILE, _folder, "a directory"),
    (CLIENTS_CSV_FILE, _fifo, "a FIFO"),
    (CLIENTS_CSV_FILE, _folder, "a directory"),
    (MLFLOW_RUNS, _fifo, "a FIFO"),
    (MLFLOW_RUNS, _folder, "a directory"),
    (TENSORBOARD_DIR, _file, "a file"),
    (TENSORBOARD_DIR, _fifo, "a FIFO"),
]


@needs_fifo
@pytest.mark.parametrize(("name", "make", "what"), CASES, ids=[f"{n}-{m.__name__[1:]}" for n, m, _ in CASES])
def test_resume_refuses_a_sink_output_that_is_something_else(cut_with_csv: Path, name: str, make: Callable[[Path], None], what: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = cut_with_csv / name
    if path.is_file():
        path.unlink()
    make(path)
    mode = os.lstat(path).st_mode
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK) if stat.S_ISFIFO(mode) else None
    try:
        before = sorted(p.name for p in cut_with_csv.iterdir())
        assert main(["resume", str(cut_with_csv)]) == 2
    finally:
        if reader is not None:
            os.close(reader)
    err = capsys.readouterr().err
    assert err.startswith(f"chillfl: error: {name}: {path} is {what}; ") and len(err.splitlines()) == 1, err
    assert "remove it" in err
    assert sorted(p.name for p in cut_with_csv.iterdir()) == before  # nothing written: the folder as it was
    assert os.lstat(path).st_mode == mode and not (cut_with_csv.parent / "cut").exists()


def test_a_sink_output_the_run_wrote_is_resumed(cut_with_csv: Path) -> None:
    """The checks pass the sinks' own files: the resume finishes the run and its metrics.csv has every round."""
    assert main(["resume", "-q", str(cut_with_csv)]) == 0
    rows = (cut_with_csv.parent / "cut" / CSV_FILE).read_text().splitlines()
    assert [r.split(",")[0] for r in rows] == ["round", "1", "2"]


def test_the_run_folder_names_the_sinks_outputs() -> None:
    """run_folder names them (chillfl.sinks imports the storage package, not the other way round): the same names."""
    from chillfl.storage.run_folder import SINK_FILES, SINK_FOLDERS

    assert SINK_FILES == (CSV_FILE, CLIENTS_CSV_FILE, MLFLOW_RUNS) and SINK_FOLDERS == (TENSORBOARD_DIR,)

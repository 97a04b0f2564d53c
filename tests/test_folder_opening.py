"""Opening a result folder leaves nothing half-written: a run's (``ResultWriter``) and a comparison's (``open_folder``).

A Ctrl-C (or any error) while the folder is being set up removes it again; a comparison's ``config.toml`` and
``sweep.json`` are written atomically, with the folder's lock already held (before, they were written in place
and the lock was taken only after, and a Ctrl-C inside ``ResultWriter.__init__`` left an empty ``NAME.partial``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl.storage.results as results
import chillfl.sweeps.run as sweeps_run
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.storage.results import ResultWriter, RunLock
from chillfl.sweeps.plan import plan_runs


def _interrupt(*args: object, **kwargs: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.parametrize("where", ["lock", "metrics"])
def test_a_ctrl_c_inside_the_result_writer_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    if where == "lock":
        monkeypatch.setattr(results, "RunLock", _interrupt)
    else:
        monkeypatch.setattr(ResultWriter, "_open_metrics", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        ResultWriter(tmp_path, "run")
    assert list(tmp_path.iterdir()) == []


def _plan(tmp_path: Path):  # type: ignore[no-untyped-def]
    config = load_config(None, {"name": "cmp", "out_dir": str(tmp_path / "out"), "dataset.name": "digits", "federation.rounds": 1})
    return config, plan_runs(config, ["client.lr=0.05,0.1"], None, None, None)


def test_a_ctrl_c_while_a_comparison_folder_is_opened_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, plan = _plan(tmp_path)
    monkeypatch.setattr(sweeps_run, "write_sweep", _interrupt)
    with pytest.raises(KeyboardInterrupt):
        sweeps_run.open_folder(config, plan, None, True, resumable=True)
    assert list((tmp_path / "out").iterdir()) == []


def test_a_comparison_folder_is_locked_before_its_files_are_written_and_they_are_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, plan = _plan(tmp_path)
    seen: list[str] = []
    write = sweeps_run.write_sweep

    def checking(partial: Path, record: object) -> None:
        with pytest.raises(ConfigError):  # FolderInUse: this process already holds it
            RunLock(partial)
        seen.append("locked")
        write(partial, record)  # type: ignore[arg-type]

    atomic = sweeps_run.write_atomic

    def recording(path: Path, data: bytes) -> None:
        with pytest.raises(ConfigError):
            RunLock(path.parent)
        seen.append(path.name)
        atomic(path, data)

    monkeypatch.setattr(sweeps_run, "write_sweep", checking)
    monkeypatch.setattr(sweeps_run, "write_atomic", recording)
    where, lock = sweeps_run.open_folder(config, plan, None, True, resumable=True)
    try:
        assert where.partial is not None and seen[:2] == ["config.toml", "locked"], seen
        assert sorted(p.name for p in where.partial.iterdir()) == ["config.toml", "sweep.json"]
    finally:
        if lock is not None:
            lock.release()


@pytest.mark.parametrize("moment", ["built", "before_the_rounds"])
def test_a_ctrl_c_right_after_the_run_folder_is_made_leaves_no_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moment: str) -> None:
    """A SIGINT the instant ``ResultWriter`` has returned (before ``run_experiment`` stood ready to clean up after it),
    or once the folder's config is written and before the run's own signal handling is installed: each left an empty
    ``NAME.partial`` (nothing to resume) that pushed the next run to ``NAME-2``."""
    import signal

    import chillfl.runner as runner

    if moment == "built":
        writer = runner.ResultWriter

        def built(*args: object) -> ResultWriter:
            made = writer(*args)  # type: ignore[arg-type]
            signal.raise_signal(signal.SIGINT)  # the Ctrl-C, as the call returns
            return made

        monkeypatch.setattr(runner, "ResultWriter", built)
    else:
        run = runner._run

        def starting(*args: object, **kwargs: object) -> object:
            signal.raise_signal(signal.SIGINT)
            return run(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(runner, "_run", starting)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own: a Ctrl-C raises KeyboardInterrupt
    try:
        config = load_config(None, {"name": "run", "out_dir": str(tmp_path / "out"), "dataset.name": "digits", "federation.rounds": 1})
        with pytest.raises(KeyboardInterrupt):
            runner.run_experiment(config, progress=False)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert list((tmp_path / "out").iterdir()) == []

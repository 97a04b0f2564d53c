"""A run folder's state is read from what it holds, through a link or renamed without ``.partial``, as resume reads it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import chillfl
from chillfl.cli import main
from chillfl.engine.view import RunView
from chillfl.storage.results import RunLock
from chillfl.storage.run_state import folder_state


class _Interrupt:
    """Stops the run in round 2, after its round-1 checkpoint (as Ctrl-C does)."""

    def on_round(self, record: dict[str, object], run: RunView) -> None:
        if record["round"] == 2:
            raise KeyboardInterrupt


def _stopped(tmp_path: Path) -> Path:
    """A digits run of 3 planned rounds stopped after its round-1 checkpoint: its ``tiny.partial``."""
    config = {"name": "tiny", "seed": 0, "federation": {"num_clients": 2, "rounds": 3, "clients_per_round": 2}, "client": {"epochs": 1},
              "dataset": {"name": "digits"}, "model": {"name": "mlp"}, "checkpoint": {"every": 1}}
    with pytest.raises(KeyboardInterrupt):
        chillfl.run(config=config, callbacks=[_Interrupt()], out_dir=tmp_path / "res", progress=False)
    return tmp_path / "res" / "tiny.partial"


def _line(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["status", str(folder)]) == 0
    return capsys.readouterr().out.splitlines()[-1]


def test_a_stopped_run_through_a_link_or_renamed_is_stopped_not_finished(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: "finished (its summary.json is missing)" for the link and the renamed copy, which `chillfl resume` goes on with."""
    partial = _stopped(tmp_path)
    state = folder_state(partial, "tiny", 3)
    assert (state.kind, state.detail, state.rounds) == ("stopped", "resumes after round 1, its checkpoint", 2)
    (tmp_path / "plink").symlink_to(partial)
    shutil.copytree(partial, tmp_path / "exp1")
    for other in (tmp_path / "plink", tmp_path / "exp1"):
        assert folder_state(other, "tiny", 3) == state, other
        name = "tiny" if other.is_symlink() else other.name  # a link names the run it leads to (its head names the link)
        assert _line(other, capsys) == f"| {name} | stopped (resumes after round 1, its checkpoint) | 2/3 | - |"


def test_a_running_run_through_a_link_is_running(tmp_path: Path) -> None:
    """The lock cannot be taken through a link (O_NOFOLLOW): a running run reached by one was "finished"."""
    partial = _stopped(tmp_path)
    (tmp_path / "live").symlink_to(partial)
    lock = RunLock(partial)
    try:
        assert folder_state(tmp_path / "live", "tiny", 3).kind == "running"
    finally:
        lock.release()


def test_a_diverged_runs_copy_renamed_without_its_suffix_is_diverged(tmp_path: Path) -> None:
    """A copy of a ``.failed`` folder without the suffix keeps its checkpoint and ``failure.json``: resume refuses it as
    diverged, and status called it "stopped (resumes after round 1 ...)" (rev116e 3)."""
    partial = _stopped(tmp_path)
    (partial / "failure.json").write_text('{"round": 2, "reason": "training loss is nan"}', encoding="utf-8")
    shutil.copytree(partial, tmp_path / "copy")
    state = folder_state(tmp_path / "copy", "tiny", 3)
    assert (state.kind, state.detail) == ("diverged", "at round 2")

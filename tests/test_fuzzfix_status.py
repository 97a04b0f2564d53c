"""``chillfl status`` of a stopped run whose files resume refuses: it said "resumes after round 1, its checkpoint" for a
torn checkpoint, an edited or garbled config.toml, a cut or garbled metrics.jsonl. It now asks resume's own checks
(:func:`chillfl.storage.run_folder.check_saved_files`), reading files only, and says why resume refuses and what to do."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.runner import CHECKPOINT, run_experiment
from chillfl.storage.run_state import folder_state
from resume_cases import Crash, _CrashIn
from test_damaged_files import TINY


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run stopped after round 1's checkpoint (as by kill -9 in round 2), made once: each test damages a copy."""
    out = tmp_path_factory.mktemp("stopped")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(runner, "_plots", lambda *args: None)
        with pytest.raises(Crash):
            run_experiment(load_config(None, {**TINY, "name": "cut", "out_dir": str(out)}), progress=False, callbacks=[_CrashIn(2)])
    return out / "cut.partial"


def _half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # a tensor's byte: the header still reads, the checksum no longer matches
    path.write_bytes(bytes(data))


def _edit_seed(path: Path) -> None:
    text = path.read_text()
    assert "\nseed = 0\n" in text
    path.write_text(text.replace("\nseed = 0\n", "\nseed = 1\n", 1))


def _cut(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:10])  # inside round 1's line, which the checkpoint continues


def _garbage(path: Path) -> None:
    path.write_bytes(b"\xff\x00not a file of this run\x80" * 10)


def _delete(path: Path) -> None:
    path.unlink()


def _row(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["status", str(folder)]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| cut |"))


DAMAGES: list[tuple[str, Callable[[Path], None], str, str]] = [
    (CHECKPOINT, _half, "checkpoint damaged: resume refuses it; start the run again", "checkpoint"),
    (CHECKPOINT, _flip_last_byte, "checkpoint damaged: resume refuses it; start the run again", "checkpoint"),
    (CHECKPOINT, _garbage, "checkpoint damaged: resume refuses it; start the run again", "checkpoint"),
    ("config.toml", _edit_seed, "config.toml changed since the checkpoint: resume needs --force", "config.toml"),
    ("config.toml", _garbage, "config.toml changed since the checkpoint and is no TOML: resume refuses it, --force too", "config.toml"),
    ("metrics.jsonl", _garbage, "metrics.jsonl changed since the checkpoint (edited, cut or missing): resume needs --force", "metrics.jsonl"),
    ("metrics.jsonl", _cut, "metrics.jsonl changed since the checkpoint (edited, cut or missing): resume needs --force", "metrics.jsonl"),
    ("metrics.jsonl", _delete, "metrics.jsonl changed since the checkpoint (edited, cut or missing): resume needs --force", "metrics.jsonl"),
]


@pytest.mark.parametrize(("name", "damage", "said", "field"), DAMAGES, ids=[f"{n}-{d.__name__.strip('_')}" for n, d, _, _ in DAMAGES])
def test_status_of_a_stopped_run_says_what_resume_refuses(
    stopped: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, damage: Callable[[Path], None], said: str, field: str
) -> None:
    folder = tmp_path / "cut.partial"
    shutil.copytree(stopped, folder)
    assert "stopped (resumes after round 1, its checkpoint)" in _row(folder, capsys)  # intact: resumable
    damage(folder / name)
    row = _row(folder, capsys)
    assert f"stopped ({said}" in row and "resumes after" not in row, row
    assert main(["resume", "-q", str(folder)]) == 2  # what status says: resume refuses it
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"chillfl: error: {field}: ") and len(err.splitlines()) == 1, err


def test_a_damaged_checkpoint_of_a_comparisons_run_says_how_the_comparison_runs_it_again(stopped: Path, tmp_path: Path) -> None:
    (tmp_path / "sweep.json").write_text("{}")  # what makes the parent a comparison's folder (is_sweep)
    folder = tmp_path / "cut.partial"
    shutil.copytree(stopped, folder)
    _half(folder / CHECKPOINT)
    state = folder_state(folder, "cut", 2)
    assert state.detail == "checkpoint damaged: resume refuses it; remove its folder and resume the comparison, which runs it again", state


def test_a_run_a_callback_stopped_is_not_said_to_continue_from_a_damaged_checkpoint(stopped: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cut"
    shutil.copytree(stopped, folder)
    (folder / "summary.json").write_text(json.dumps({"rounds": 1, "final_global_acc": 0.5, "stopped": {"reason": "plateau"}}))
    _half(folder / CHECKPOINT)
    state = folder_state(folder, "cut", 2)
    assert state.kind == "stopped" and state.detail == "early, by a callback: plateau; checkpoint damaged: resume refuses it; start the run again", state

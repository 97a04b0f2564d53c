"""A stopped run moves to another executor on resume: between executors of one float path (sequential, processes)
without --force and bit for bit; to the vectorized executor (other last bits) only with --force, and said so."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.runner import resume_experiment, run_experiment
from chillfl.storage.run_folder import executor_move
from resume_cases import TINY, Crash, _CrashIn


def _cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executor: str) -> tuple[Path, Path]:
    """An uninterrupted sequential run, and one that crashed in round 3 (checkpoint of round 2) with ``executor`` in its config.toml."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)

    def config(name: str, every: int) -> Any:
        return load_config(None, {**TINY, "name": name, "out_dir": str(tmp_path), "checkpoint.every": every})

    reference = run_experiment(config("ref", 0), progress=False).folder
    with pytest.raises(Crash):
        run_experiment(config("cut", 1), progress=False, callbacks=[_CrashIn(3)])
    partial = tmp_path / "cut.partial"
    text = (partial / "config.toml").read_text(encoding="utf-8")
    assert 'executor = "sequential"' in text
    (partial / "config.toml").write_text(text.replace('executor = "sequential"', f'executor = "{executor}"'), encoding="utf-8")
    assert reference is not None
    return reference, partial


def test_a_run_moves_to_the_process_pool_without_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    reference, partial = _cut(tmp_path, monkeypatch, "processes")
    with caplog.at_level(logging.INFO, logger="chillfl.storage.run_folder"):
        resumed = resume_experiment(partial, progress=False).folder
    assert resumed is not None and (resumed / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
    assert "executor 'sequential' -> 'processes' since the checkpoint of round 2: the same float path" in caplog.text


def test_a_move_to_the_vectorized_executor_needs_force_and_is_said_not_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                               caplog: pytest.LogCaptureFixture) -> None:
    _, partial = _cut(tmp_path, monkeypatch, "vectorized")
    with pytest.raises(ConfigError, match="executor: 'sequential' -> 'vectorized'.*--force"):
        resume_experiment(partial, progress=False)
    with caplog.at_level(logging.WARNING, logger="chillfl.storage.run_folder"):
        assert resume_experiment(partial, progress=False, force=True).folder is not None
    assert "executor 'sequential' -> 'vectorized' since the checkpoint of round 2: another float path, not bitwise" in caplog.text


@pytest.mark.parametrize(("saved", "now", "only", "bitwise"), [
    ('executor = "processes"\nthreads = 1\n', 'executor = "sequential"\nthreads = 1\n', True, True),
    ('threads = 2\n', 'executor = "ray"\nthreads = 2\n', True, True),  # unset: sequential
    ('executor = "processes"\nthreads = 0\n', 'executor = "sequential"\nthreads = 0\n', True, False),  # the workers' count is not torch's default
    ('executor = "sequential"\n', 'executor = "auto"\n', True, False),
    ('executor = "sequential"\nseed = 1\n', 'executor = "processes"\nseed = 2\n', False, True),
])
def test_which_moves_keep_the_bits(saved: str, now: str, only: bool, bitwise: bool) -> None:
    move = executor_move(saved, now.encode())
    assert move is not None and (move.only, move.bitwise) == (only, bitwise)
    assert executor_move('executor = "processes"\n', b'executor = "processes"\nseed = 3\n') is None

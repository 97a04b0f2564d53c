"""A run's resume and a comparison's take and refuse the same edits of ``executor`` (one decision, one INFO line)."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest
import torch

from chillfl.errors import ConfigError
from chillfl.storage.checkpoint import write_state
from chillfl.storage.run_folder import CHECKPOINT, STARTED_IN, open_for_resume
from chillfl.storage.run_state import SWEEP_FILE
from chillfl.sweeps.record import FORMAT, read_sweep

MOVES = [  # (saved, now): what test_execfix_executor_move's table says of each
    ('executor = "processes"\nthreads = 1\n', 'executor = "sequential"\nthreads = 1\n'),  # taken
    ('threads = 2\n', 'executor = "ray"\nthreads = 2\n'),  # taken: unset is sequential
    ('executor = "processes"\nthreads = 0\n', 'executor = "sequential"\nthreads = 0\n'),  # refused: not bitwise
    ('executor = "sequential"\n', 'executor = "vectorized"\n'),  # refused: another float path
    ('executor = "sequential"\nseed = 1\n', 'executor = "processes"\nseed = 2\n'),  # refused: not the only edit
]


def _run_folder(tmp_path: Path, saved: str, now: str) -> Path:
    """A stopped run's folder (checkpoint of round 1) whose config.toml was edited from ``saved`` to ``now``."""
    folder = tmp_path / "run.partial"
    folder.mkdir()
    (folder / "config.toml").write_text(now, encoding="utf-8")
    (folder / "metrics.jsonl").write_bytes(b"")
    run = {"config_toml": saved, "config_sha256": hashlib.sha256(saved.encode()).hexdigest(), STARTED_IN: str(tmp_path)}
    write_state(folder / CHECKPOINT, {"round": 1, "protocol": {"w": torch.zeros(1)}}, run)
    return folder


def _sweep_folder(tmp_path: Path, saved: str, now: str) -> Path:
    """A stopped comparison's folder whose config.toml was edited from ``saved`` to ``now``."""
    folder = tmp_path / "sw-compare.partial"
    folder.mkdir()
    (folder / "config.toml").write_text(now, encoding="utf-8")
    record = {"format": FORMAT, "resumable": True, "reference": None, "variants": [], "options": {},
              "config_toml": saved, "config_sha256": hashlib.sha256(saved.encode()).hexdigest()}
    (folder / SWEEP_FILE).write_text(json.dumps(record), encoding="utf-8")
    return folder


def _resume_run(folder: Path) -> None:
    open_for_resume(folder).lock.release()


@pytest.mark.parametrize(("saved", "now"), MOVES)
def test_a_run_and_a_comparison_take_the_same_executor_moves_and_say_the_same(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                                              saved: str, now: str) -> None:
    """run_folder and sweeps.record each wrote the decision (``move.only and move.bitwise``) and its INFO line: one
    helper now, so the two resumes cannot drift apart; their lines differ only in what the edit was made since."""
    said: dict[str, str | None] = {}
    for kind, make, resume, since in (("run", _run_folder, _resume_run, "the checkpoint of round 1"),
                                      ("sweep", _sweep_folder, read_sweep, "the comparison started")):
        (tmp_path / kind).mkdir()
        folder = make(tmp_path / kind, saved, now)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="chillfl"):
            try:
                resume(folder)
            except ConfigError as exc:
                assert exc.field == "config.toml" and f"changed since {since}" in str(exc) and "--force" in str(exc)
                said[kind] = None
                continue
        lines = [r.getMessage() for r in caplog.records if "executor" in r.getMessage()]
        assert len(lines) == 1 and f" since {since}: " in lines[0], lines
        said[kind] = lines[0].replace(since, "SINCE")
    assert said["run"] == said["sweep"], said
    taken = saved.startswith("executor = \"processes\"\nthreads = 1") or saved == "threads = 2\n"
    assert (said["run"] is not None) == taken

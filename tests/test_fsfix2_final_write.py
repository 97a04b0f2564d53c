"""A run whose final figure write fails (a full disk, ``ulimit -f``) with ``federation.rounds <= checkpoint.every`` had
no checkpoint, so every round was lost though its results were on disk, and ``resume`` said the folder "holds no
trained state" (fsfault finding 4). The last round is now checkpointed too (removed once the folder is final, as
before): such a folder resumes, and finishes with the uninterrupted run's results."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import StorageError
from chillfl.runner import CHECKPOINT, run_experiment

from test_damaged_files import TINY


def _full(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_run_whose_figures_fail_resumes_to_the_uninterrupted_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    options = {**TINY, "checkpoint.every": 10}  # 2 rounds: no checkpoint but the last round's
    whole = run_experiment(load_config(None, {**options, "name": "whole", "out_dir": str(tmp_path / "a")}), progress=False).folder
    monkeypatch.setattr(runner, "_plots", _full)
    with pytest.raises(StorageError, match="checkpoint of round 2 is kept"):
        run_experiment(load_config(None, {**options, "name": "cut", "out_dir": str(tmp_path / "b")}), progress=False)
    partial = tmp_path / "b" / "cut.partial"
    assert (partial / CHECKPOINT).is_file()
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    assert main(["resume", "-q", str(partial)]) == 0
    done = tmp_path / "b" / "cut"
    assert not (done / CHECKPOINT).exists() and whole is not None and not (whole / CHECKPOINT).exists()
    for name in ("model.safetensors", "partition.json"):
        assert (done / name).read_bytes() == (whole / name).read_bytes(), name
    assert _records(done / "metrics.jsonl") == _records(whole / "metrics.jsonl")
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (done, whole)]
    assert summaries[0] | {"wall_time_s": 0, "environment": 0} == summaries[1] | {"wall_time_s": 0, "environment": 0}


def _records(path: Path) -> list[dict[str, object]]:
    """metrics.jsonl's records without their timings."""
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(("time", "wall"))} for line in path.read_text().splitlines()]


def test_without_checkpoints_a_failed_final_write_is_not_said_to_hold_no_trained_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``checkpoint.every = 0`` writes none, so that folder cannot resume; its line no longer says it "holds no trained state"."""
    monkeypatch.setattr(runner, "_plots", _full)
    with pytest.raises(StorageError, match="no checkpoint was written"):
        run_experiment(load_config(None, {**TINY, "checkpoint.every": 0, "name": "cut", "out_dir": str(tmp_path)}), progress=False)
    assert main(["resume", str(tmp_path / "cut.partial")]) == 2
    line = capsys.readouterr().err.strip()
    assert "no trained state" not in line and "before its first checkpoint" not in line, line  # rev104c 3: it opened with that
    assert "every round ran, its summary.json and model hold their results" in line, line
    assert main(["status", str(tmp_path / "cut.partial")]) == 0  # status says what happened: after the last round, not before the first checkpoint
    said = capsys.readouterr().out
    assert "after its last round, before its folder was complete" in said and "before its first checkpoint" not in said, said


def test_a_comparisons_run_whose_last_write_failed_is_not_said_to_have_stopped_before_its_first_checkpoint(tmp_path: Path) -> None:
    """9aeb6288 reworded a single run's folder only: inside a comparison, a run's .partial holding summary.json and no
    checkpoint still said "stopped before its first checkpoint", in resume's line and in status (rev104d 2)."""
    from chillfl.storage.run_folder import _no_checkpoint
    from chillfl.storage.run_state import FINAL_WRITE_FAILED_IN_COMPARISON, SWEEP_FILE, folder_state

    comparison = tmp_path / "cmp-compare.partial"
    run = comparison / "A-s0.partial"
    run.mkdir(parents=True)
    (comparison / SWEEP_FILE).write_text("{}")
    (run / "summary.json").write_text("{}")
    line = _no_checkpoint(run)
    assert "every round ran" in line and "before its first checkpoint" not in line and "runs it again as part of its comparison" in line, line
    assert folder_state(run, "A-s0").detail == FINAL_WRITE_FAILED_IN_COMPARISON
    (run / "summary.json").unlink()  # no summary: it did stop before its first checkpoint
    assert "before its first checkpoint" in _no_checkpoint(run) and folder_state(run, "A-s0").detail == "before its first checkpoint: runs again"

"""A shard never removes a run folder another process holds (cluster finding 1): a duplicate of a shard (a requeued job
whose first try still runs) found that run's ``NAME.partial`` without a checkpoint and removed it under the running
process, then wrote its own files where the first one was finishing (chillfl.sweeps.resume.stopped_run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.storage.results import RunLock

from test_sweep_shard import _config, _run  # the shard tests' comparison: 2 variants x 2 seeds, 2 rounds


def test_a_duplicate_shard_leaves_a_run_another_process_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The lock is held here, in the test process (another open of the folder: flock refuses it as another process's)."""
    config = _config(tmp_path)
    assert _run(config, tmp_path, "--shard", "1/2") == 0  # a-s0 and b-s0 ended; the folder stays .partial
    partial = tmp_path / "sh-compare.partial"
    running = partial / "b-s0.partial"
    (partial / "b-s0").rename(running)  # b-s0 as the first try of the shard has it: running, no checkpoint yet
    (running / "summary.json").unlink()
    metrics = (running / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    held = RunLock(running)
    try:
        assert _run(config, tmp_path, "--shard", "1/2") == 2
    finally:
        held.release()
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"chillfl: error: run_dir: {running} is in use by another chillfl process (a run or resume of it is going on)", err
    assert (running / "metrics.jsonl").read_bytes() == metrics  # the other process's folder, untouched
    assert not (partial / "b-s0").exists()
    assert _run(config, tmp_path, "--shard", "1/2") == 0  # once it is let go (the other process died): it runs again from the start
    assert (partial / "b-s0" / "summary.json").is_file() and not running.exists()

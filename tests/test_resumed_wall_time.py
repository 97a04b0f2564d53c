"""A resumed run's ``wall_time_s`` is the whole run's: its checkpoints carry the seconds taken up to them, and the
command that finishes adds its own. It counted the finishing command alone (0.7 s of a 3.6 s run)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

import chillfl.runner as runner
from chillfl.config import load_config
from chillfl.runner import resume_experiment, run_experiment
from chillfl.storage.checkpoint import read_state
from procs import InterruptAt

CONFIG = {"name": "wt", "dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.clients_per_round": 2,
          "federation.rounds": 4, "client.batch_size": 32, "checkpoint.every": 1, "eval.client_split_size": 20}


@pytest.mark.filterwarnings("ignore:Creating legend")  # the patched clock reaches matplotlib too
def test_a_resumed_runs_wall_time_counts_the_commands_before_its_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = itertools.count()
    monkeypatch.setattr(runner.time, "perf_counter", lambda: 1000.0 * next(ticks))  # every reading of the clock: 1000 s later
    config = load_config(None, {**CONFIG, "out_dir": str(tmp_path)})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, callbacks=[InterruptAt(3)])
    partial = tmp_path / "wt.partial"
    before = read_state(partial / "checkpoint.safetensors")["wall_time_s"]
    assert before >= 1000.0  # round 2's checkpoint: at least one tick after the start
    out = resume_experiment(partial, progress=False)
    wall = json.loads((out.folder / "summary.json").read_text())["wall_time_s"]
    assert wall >= before + 1000.0  # the first command's seconds up to its checkpoint, and the finishing command's


def test_a_checkpoint_without_its_seconds_counts_none() -> None:
    """A checkpoint written before it recorded them (or a damaged value) resumes as 0 s taken, not a traceback."""
    assert runner._wall_time({"round": 2}) == 0.0
    assert runner._wall_time({"wall_time_s": float("nan")}) == 0.0 and runner._wall_time({"wall_time_s": "x"}) == 0.0
    assert runner._wall_time({"wall_time_s": 12.5}) == 12.5

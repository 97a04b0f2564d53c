"""A script without the ``__main__`` guard that runs chillfl with ``executor = "processes"``: each spawned worker
re-runs the script while it starts, which called ``chillfl.run`` again there. Every worker claimed a run folder
(``run-2.partial`` ... left behind) and the output was a traceback a screen long per worker. Now a worker that is
starting ends at the call with one line pointing to the guard, before any folder is claimed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from chillfl.api import refuse_in_worker_start

SRC = str(Path(__file__).resolve().parents[1] / "src")

UNGUARDED = """import torch
import chillfl

torch.manual_seed(0)
x, y = torch.randn(120, 8), torch.randint(0, 3, (120,))
data = chillfl.TensorData(x[:100], y[:100], x[100:], y[100:], num_classes=3)
model = torch.nn.Linear(8, 3)
chillfl.run(model=model, data=data, out_dir={out!r}, progress=False,
            config={{"name": "ng", "executor": "processes", "threads": 1,
                    "federation": {{"num_clients": 2, "clients_per_round": 2, "rounds": 1}}, "client": {{"batch_size": 32}}}})
print("FINISHED")
"""


def test_an_unguarded_script_under_the_processes_executor_ends_with_the_guard_line_and_claims_no_worker_folders(tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED.format(out=str(out)), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode != 0 and "FINISHED" not in done.stdout
    lines = [line for line in done.stderr.splitlines() if line.startswith("chillfl: error: chillfl.run was called while a worker process started")]
    assert lines and 'if __name__ == "__main__":' in lines[0] and "python-api.md" in lines[0]
    assert "bootstrapping phase" not in done.stderr  # multiprocessing's own error (and its traceback) no longer reached
    folders = sorted(p.name for p in out.iterdir()) if out.exists() else []
    assert len(folders) <= 1, folders  # at most the parent's own run folder; no worker claimed one


def test_outside_a_starting_worker_nothing_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    refuse_in_worker_start("chillfl.run")  # the main process
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(SystemExit) as stop:
        refuse_in_worker_start("chillfl.compare")
    assert str(stop.value.code).startswith("chillfl: error: chillfl.compare was called while a worker process started")


def test_the_command_line_entry_called_from_an_unguarded_script_is_refused_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """``chillfl.cli.main([...])`` from a script is an entry point as ``chillfl.run`` is: its workers claimed
    ``c-2.partial``, ``c-3.partial`` and printed multiprocessing's traceback each."""
    import multiprocessing

    import chillfl.cli

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(SystemExit) as stop:
        chillfl.cli.main(["list"])
    assert str(stop.value.code).startswith("chillfl: error: chillfl.cli.main was called while a worker process started")

"""A job-wide SIGTERM (Slurm's scancel: ``kill -TERM -- -PGID``) while a ``processes`` run's workers start is the run's
interrupted exit, 143, with its one line, and leaves no process.

The workers ignore the stop signals (the parent decides), but they set that only in their loop, after the spawned
interpreter had imported the parent's main module, torch and chillfl: a signal in those seconds killed a worker with the
default action, and the run ended ``worker failed: worker chillfl-worker-0 died with exit code -15`` with exit 1. Now the
signals are blocked while a worker starts (the mask is inherited through spawn's exec) and the worker ignores them before
it unblocks them.

Forced deterministically: the run is started from a script, which spawn re-imports in every worker as ``__mp_main__``
first of all (before torch): there, the first worker signals the whole process group, its own included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from procs import SESSION, live_pids

pytestmark = pytest.mark.slow  # a processes run in a subprocess: workers import torch (seconds each)

CONFIG = """\
name = "early"
seed = 1
threads = 1
device = "cpu"
executor = "processes"
out_dir = "{out}"
[dataset]
name = "digits"
[model]
name = "mlp"
hidden = [8]
[federation]
num_clients = 4
clients_per_round = 2
rounds = 3
[client]
epochs = 1
batch_size = 32
lr = 0.05
[eval]
client_split_size = 20
[checkpoint]
every = 1
"""

DRIVER = textwrap.dedent(
    """
    import os, signal, sys

    if __name__ == "__mp_main__":  # a worker's start-up, before it imports torch: the job is signalled (once)
        try:
            os.close(os.open(os.environ["SIGNALLED_MARK"], os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            os.killpg(os.getpgrp(), signal.SIGTERM)
    elif __name__ == "__main__":
        from chillfl.cli import entry

        entry()
    """
)


def test_sigterm_to_the_job_while_workers_start_is_the_interrupted_exit(tmp_path: Path) -> None:
    config = tmp_path / "early.toml"
    config.write_text(CONFIG.format(out=tmp_path / "out"))
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    mark = tmp_path / "signalled"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SIGNALLED_MARK": str(mark), "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, str(driver), "run", str(config), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    try:
        _, err = proc.communicate(timeout=300)
        assert mark.exists()  # a worker did signal the job
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert "worker failed" not in err and "Traceback" not in err, err
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines[-1].startswith("chillfl: interrupted by SIGTERM"), lines
        deadline = time.monotonic() + 60  # a hang guard, not a bound under test: the resource tracker leaves once the run's pipe closes
        while time.monotonic() < deadline and live_pids(SESSION, proc.pid):
            time.sleep(0.05)
        assert live_pids(SESSION, proc.pid) == []  # no worker (nor resource tracker) outlives the run
    finally:
        for pid in live_pids(SESSION, proc.pid):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

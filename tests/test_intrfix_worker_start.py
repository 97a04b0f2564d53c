"""A ``processes`` worker whose parent is SIGKILLed while the worker starts leaves then, not once it has imported torch
(intrfix): its parent watch started only after that import, seconds into its life, so it outlived the parent as long.

Deterministic (no timing): a ``sitecustomize`` on the children's path makes a spawned worker's import of torch last two
minutes; the worker must be gone well before that. The hang guard is no bound under test.
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
from procs import alive

from chillfl import cli

pytestmark = pytest.mark.slow  # a child that imports torch and spawns a worker (seconds): left out of the fast loop, run by CI

SLOW_TORCH = textwrap.dedent(
    """
    import sys, time

    if "--multiprocessing-fork" in sys.argv:  # a spawned worker only


        class SlowTorch:
            def find_spec(self, name, path=None, target=None):
                if name == "torch":
                    sys.meta_path.remove(self)
                    time.sleep(120)
                return None


        sys.meta_path.insert(0, SlowTorch())
    """
)

PARENT = textwrap.dedent(
    """
    import time

    if __name__ == "__main__":
        from chillfl.executors.processes import WorkerPool

        pool = WorkerPool(workers=1)
        print(pool.pids[0], flush=True)
        time.sleep(600)
    """
)


def test_a_worker_leaves_when_its_parent_is_killed_during_its_start(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_TORCH)
    (tmp_path / "parent.py").write_text(PARENT)
    temp = tmp_path / "t"
    temp.mkdir()
    src = str(Path(cli.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), src, *filter(None, [os.environ.get("PYTHONPATH")])]), "TMPDIR": str(temp)}
    proc = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    worker = 0
    try:
        assert proc.stdout is not None
        worker = int(proc.stdout.readline())
        time.sleep(1.0)  # not a bound: lets the worker get into its (slowed) start-up; it passes as well without
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 60  # a hang guard: the slowed import alone lasts 120 s
        while time.monotonic() < deadline and alive(worker):
            time.sleep(0.1)
        assert not alive(worker), "the worker outlived its SIGKILLed parent for its whole start-up"
        assert not [p for p in temp.iterdir() if p.name.startswith("pymp-")]  # the dead parent's folder, removed by its worker
    finally:
        for pid in (proc.pid, worker):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

"""chillfl's progress output leaves multiprocessing's start method alone: tqdm's default lock made a
``multiprocessing.RLock`` on the default context at the first bar or ``tqdm.write`` (every run's progress lines, any
``chillfl.cli.main`` error line), so the user's later ``multiprocessing.set_start_method("spawn")`` raised "context has
already been set". Each case runs in a fresh interpreter: the start method is the process's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

CHECK = """
import multiprocessing
assert multiprocessing.get_start_method(allow_none=True) is None, multiprocessing.get_start_method(allow_none=True)
multiprocessing.set_start_method("spawn")
print("spawn set")
"""

CASES = {
    "progress_lines": """
        import torch, chillfl
        torch.manual_seed(0)
        x = torch.randn(24, 3); y = (x[:, 0] > 0).long()
        chillfl.run(model=torch.nn.Linear(3, 2), data=chillfl.TensorData(x, y, x, y, num_classes=2), write=False, progress="lines",
                    config={"federation": {"num_clients": 2, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"}})
    """,
    "a_bar": """
        from chillfl.progress import make_bar
        from chillfl.stderr import say
        bar = make_bar("bar", 2, 0, "run")
        say("a notice above the bar")
        bar.update(2)
        bar.close()
    """,
    "a_cli_error_line": """
        import tqdm  # loaded, as after any run in the process: the line is said through tqdm.write
        import chillfl.cli
        assert chillfl.cli.main(["run", "/nonexistent/config.toml"]) == 2
    """,
}


@pytest.mark.parametrize("case", list(CASES))
def test_spawn_can_be_set_after(case: str) -> None:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(CASES[case]) + CHECK], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "spawn set" in done.stdout, done.stderr[-2000:]


def test_a_tqdm_lock_already_set_is_kept() -> None:
    import threading

    from tqdm import tqdm

    from chillfl.stderr import ThreadLock, thread_lock

    mine = threading.RLock()
    had = tqdm.__dict__.get("_lock")
    tqdm.set_lock(mine)
    try:
        thread_lock(tqdm)
        assert tqdm.get_lock() is mine
    finally:
        if had is None:
            del tqdm._lock
        else:
            tqdm.set_lock(had)
    lock = ThreadLock()
    with lock:  # re-entrant, and process_map's mp_lock held with it once made
        with lock:
            pass
    assert "mp_lock" not in lock.__dict__

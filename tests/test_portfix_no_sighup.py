"""Windows has no SIGHUP: chillfl named ``signal.SIGHUP`` at import time (the CLI's HungUp, the executors' stop-signal
sets), so ``import chillfl.runner`` failed there with an AttributeError. SIGHUP is now held only where the platform has
it. Emulated by deleting ``signal.SIGHUP`` before chillfl is imported, in a fresh interpreter."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

SCRIPT = """
import signal
del signal.SIGHUP
import chillfl, chillfl.runner, chillfl.cli, chillfl.executors.processes, chillfl.executors.ray_executor
from chillfl.stop_signals import STOP_SIGNALS, stop_signals
assert STOP_SIGNALS == (signal.SIGINT, signal.SIGTERM), STOP_SIGNALS
assert signal.SIGTERM in stop_signals()
assert chillfl.executors.processes._STOP_SIGNALS == frozenset(STOP_SIGNALS)
code = chillfl.cli.main(["list"])
print("OK", code)
"""


def test_chillfl_imports_and_its_command_runs_where_there_is_no_sighup() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "OK 0"


def test_sighup_is_still_a_stop_signal_where_there_is_one() -> None:
    from chillfl.stop_signals import STOP_SIGNALS

    assert STOP_SIGNALS == (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

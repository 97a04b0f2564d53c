"""One SIGTERM delivered as GNU ``timeout`` (or a scheduler) delivers it, to the process and then to its whole process
group, stops a Flower simulation (``chillfl.flower.run_simulation``) after its round, as one signal does.

Before: the group's copy reached the Ray that Flower's simulation started (its ClientApp actors died: "SuperNode ...
failed a client update: ActorUnavailableError", with Flower's and Ray's tracebacks), and the copy that reached the
driver counted as a second SIGTERM ("interrupted by a second SIGTERM during round 1"). Now the simulation's Ray starts
with SIGTERM/SIGHUP blocked in its processes (as chillfl's Ray executor's does), and a repeat of the same signal within
:data:`~chillfl.stop_signals.REPEAT_WINDOW_S` is the same signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from sessions import session_pids  # noqa: E402
from test_flower_signals import DRIVER  # noqa: E402


def test_a_sigterm_to_the_process_and_its_group_stops_the_simulation_after_its_round(tmp_path: Path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen([sys.executable, str(driver), str(out)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
                            text=True, start_new_session=True)
    try:
        metrics = out / "sig.partial" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.is_file() and metrics.read_text().count("\n") >= 1):  # a round is done: Ray and its actors are up
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no round within 120 s"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGTERM)  # what GNU timeout does: the command, then its process group
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=120)  # a hang guard, not a timing claim
        deadline = time.monotonic() + 15
        while session_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = session_pids(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143, err[-3000:]
    notices = [line for line in err.splitlines() if line.startswith("chillfl: ")]
    assert notices == ["chillfl: SIGTERM: stopping the Flower run after this round (a second one stops at once); "
                       "a Flower run is not checkpointed: nothing to resume, its partial result folder was removed"], err[-3000:]
    assert "STOPPED interrupted by SIGTERM after round " in err, err[-3000:]
    assert "Traceback" not in err and "second SIGTERM" not in err, err[-3000:]
    assert list(out.iterdir()) == [], "the partial folder of a run that cannot be resumed is removed"
    assert not left, f"processes of the simulation outlived it: {left}"

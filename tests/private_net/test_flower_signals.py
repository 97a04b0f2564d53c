"""A stop signal ends a Flower simulation (``chillfl.flower.run_simulation``) as it ends a chillfl run.

SIGINT or SIGTERM sent to the process that called ``run_simulation`` (here a script of its own, in a session of its
own, started WITHOUT ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``): the run stops after its round with one line naming the
signal, ``run_simulation`` raises a ``RunInterrupted`` (exit code 130 / 143) that says the run is not checkpointed, no
``.partial`` folder is left, and no process of its session (Ray, Flower's actors) outlives it. Before: one SIGINT was
ignored (the run went on to its last round), a second one left the ServerApp's thread waiting 300 s; SIGTERM
ended in Ray's C++ stack dump (exit 134), or with the variable set, hung 300 s (exit 15).
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

DRIVER = """
import sys
from chillfl.config import config_from_dict
from chillfl.flower import run_simulation
from chillfl.runner import RunInterrupted

config = config_from_dict({
    "name": "sig", "seed": 5, "threads": 1, "device": "cpu", "out_dir": sys.argv[1],
    "dataset": {"name": "digits"}, "model": {"name": "mlp"},
    "federation": {"num_clients": 4, "clients_per_round": 3, "rounds": 500},
    "client": {"epochs": 1, "batch_size": 32, "lr": 0.05},
})
try:
    run_simulation(config, num_supernodes=2)
except RunInterrupted as exc:
    print("STOPPED", exc, file=sys.stderr)
    sys.exit(exc.exit_code)
print("COMPLETED", file=sys.stderr)
"""


@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGTERM, True)])
def test_a_stop_signal_ends_the_simulation_after_its_round(sig: signal.Signals, group: bool, tmp_path: Path) -> None:
    """``group``: the signal sent as GNU ``timeout`` (or a scheduler) sends it, to the process and then to its whole
    process group. Before: the group's copy reached the Ray that Flower's simulation started (its ClientApp actors died:
    "ActorUnavailableError", with Flower's and Ray's tracebacks), and the driver's second copy counted as a second
    SIGTERM ("interrupted by a second SIGTERM during round 1"). Now that Ray starts with SIGTERM/SIGHUP blocked in its
    processes, and a repeat of the same signal within :data:`~chillfl.stop_signals.REPEAT_WINDOW_S` is that signal."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "RAY_DISABLE_FAILURE_SIGNAL_HANDLER"}
    env.update(OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")
    proc = subprocess.Popen([sys.executable, str(driver), str(out)], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env,
                            text=True, start_new_session=True)
    try:
        metrics = out / "sig.partial" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while not (metrics.is_file() and metrics.read_text().count("\n") >= 1):  # a round is done: the run is under way
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no round within 120 s"
            time.sleep(0.2)
        proc.send_signal(sig)
        if group:
            time.sleep(0.005)  # after the first copy's handler has run (sent at once, the two are often one), within the window
            os.killpg(proc.pid, sig)
        _, err = proc.communicate(timeout=120)  # a hang guard (the old code waited 300 s), not a timing claim
        deadline = time.monotonic() + 15
        while session_pids(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = session_pids(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 128 + sig, err[-3000:]
    notices = [line for line in err.splitlines() if line.startswith("chillfl: ")]
    assert notices == [f"chillfl: {sig.name}: stopping the Flower run after this round (a second one stops at once); "
                       "a Flower run is not checkpointed: nothing to resume, its partial result folder was removed"], err[-3000:]
    assert f"STOPPED interrupted by {sig.name} after round " in err
    assert "Traceback" not in err and "SIGABRT" not in err and "*** " not in err and "second SIG" not in err, err[-3000:]
    assert list(out.iterdir()) == [], "the partial folder of a run that cannot be resumed is removed"
    assert not left, f"processes of the simulation outlived it: {left}"

"""SIGHUP (the terminal or ssh session went away) stops a run as SIGTERM does, unless the run started with it ignored (``nohup``).

Before, SIGHUP's default killed the run with nothing said: it resumed from the last periodic checkpoint, and a
``processes`` run's workers died with it. A handler installed over ``nohup``'s ``SIG_IGN`` would break the
other promise: a run started under ``nohup`` must outlive the disconnect.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from chillfl.stop_signals import stop_signals
from signalled_runs import chillfl, resume, rounds, stop_with, wait_for_round, write_config


def _hangup_as(disposition: signal.Handlers) -> Callable[[], None]:
    """A ``preexec_fn`` that sets SIGHUP's disposition before the exec: the tests must not inherit the runner's (CI started
    under ``nohup`` ignores SIGHUP in every child, which made the default case a run that survives it)."""
    def set_hangup() -> None:
        signal.signal(signal.SIGHUP, disposition)

    return set_hangup


def _chillfl(*args: str, ignore_hangup: bool = False) -> subprocess.Popen:
    """``python -m chillfl ARGS`` with SIGHUP at its default; ``ignore_hangup``: started as ``nohup`` starts it (SIG_IGN)."""
    return chillfl(*args, preexec_fn=_hangup_as(signal.SIG_IGN if ignore_hangup else signal.SIG_DFL))


@pytest.mark.slow  # CLI runs signalled in subprocesses
def test_sighup_stops_after_the_round_checkpoints_and_says_how_to_resume(tmp_path: Path) -> None:
    config = write_config(tmp_path, "hup", "fedavg-fedchill", checkpoint={"every": 0}, federation={"rounds": 40})
    partial = tmp_path / "out" / "hup.partial"
    stop_with(signal.SIGHUP, _chillfl("run", str(config), "-q"), partial, 128 + signal.SIGHUP)
    resume(partial)
    assert rounds(tmp_path / "out" / "hup") == list(range(1, 41))


@pytest.mark.slow
def test_a_run_started_with_sighup_ignored_survives_sighup(tmp_path: Path) -> None:
    config = write_config(tmp_path, "nohup", "fedavg-fedchill", checkpoint={"every": 0}, federation={"rounds": 30})
    proc = _chillfl("run", str(config), "-q", ignore_hangup=True)
    wait_for_round(tmp_path / "out" / "nohup.partial" / "metrics.jsonl", 1, proc)
    assert proc.poll() is None
    proc.send_signal(signal.SIGHUP)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "SIGHUP" not in err and "interrupted" not in err, err
    assert len((tmp_path / "out" / "nohup" / "metrics.jsonl").read_text().splitlines()) == 30


def test_stop_signals_leave_an_ignored_sighup_out() -> None:
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert stop_signals() == (signal.SIGINT, signal.SIGTERM)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        assert stop_signals() == (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, previous)


TRACKER_CHILD = """
import multiprocessing.resource_tracker as rt
from chillfl.executors.processes import WorkerPool

pool = WorkerPool(1)
print(rt._resource_tracker._pid, flush=True)
input()
pool.close()
"""


def _blocked_or_ignored(pid: int) -> int:
    """The signal mask bits ``pid`` blocks or ignores (``/proc/PID/status``: SigBlk | SigIgn)."""
    fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    return int(fields["SigBlk"], 16) | int(fields["SigIgn"], 16)


def test_multiprocessings_resource_tracker_is_immune_to_sighup() -> None:
    """A terminal's hang-up reaches the whole process group: the ``processes`` pool's resource tracker (started by its
    queues, in that group) died of it, was relaunched, and printed tracebacks (KeyError on every semaphore it forgot)."""
    # SIGHUP at its default in the child: an inherited SIG_IGN (a runner under nohup) would make this pass without the fix
    proc = subprocess.Popen([sys.executable, "-c", TRACKER_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=_hangup_as(signal.SIG_DFL))
    try:
        assert proc.stdout is not None
        tracker = int(proc.stdout.readline())
        assert _blocked_or_ignored(tracker) & (1 << (signal.SIGHUP - 1))
    finally:
        proc.communicate("\n", timeout=60)
    assert proc.returncode == 0

"""A worker that runs out of memory says what it asked for; a worker that stops replying is named while the round waits."""

from __future__ import annotations

import logging
import multiprocessing
import multiprocessing.util
import os
import re
import signal
import threading
from typing import Any, Mapping

import pytest
import torch

from chillfl.executors import processes
from chillfl.executors.processes import ClientCodeError, ProcessExecutor, WorkerError, WorkerPool
from chillfl.training.local import LocalSpec
from test_executors import _alive, _assert_identical, _jobs, _mlp, one_thread_reference

ASKED = "you tried to allocate 4000000000000 bytes"


class AskTooMuch:
    """A term whose every call fails as torch's allocator does for a model that always needs more than the machine has."""

    reads = ()

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        raise MemoryError(f"{ASKED}\nsecond line, not in the message")


def test_an_out_of_memory_worker_line_quotes_the_failed_request() -> None:
    """The parent's line was a fixed "(MemoryError: Cannot allocate memory); fewer workers or smaller rounds need less":
    torch's size was lost, and a client that always asks too much was promised that a resume helps."""
    model = _mlp()
    ex = ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8, terms=(AskTooMuch(),)), workers=1)
    pid = ex.pids[0]
    try:
        with pytest.raises(WorkerError) as raised:
            ex.run(_jobs(model, [9, 7], (3, 4)))
        temp = multiprocessing.util.get_temp_dir()  # the pool's folder (short_socket_folder)
        assert not any(name.startswith("out-of-memory-") for name in os.listdir(temp))  # the note is read and removed
    finally:
        ex.close()
    line = str(raised.value)
    assert not isinstance(raised.value, ClientCodeError)
    assert f"worker chillfl-worker-0 ran out of memory (MemoryError: {ASKED});" in line, line
    assert line.endswith("; the run can go on after freeing memory or with fewer workers, unless one client alone needs more than "
                         "the machine has") and "\n" not in line, line
    assert not _alive(pid)


class StopOnce:
    """A term that stops its own worker process (SIGSTOP) at its first call there, as a deadlock in client code would
    hold it; it adds nothing to the loss. In the test's own process (the sequential reference) it never stops."""

    reads = ()

    def __init__(self) -> None:
        self.stopped = False

    def __call__(self, params: Mapping[str, torch.Tensor], context: Mapping[str, Any]) -> torch.Tensor:
        if multiprocessing.parent_process() is not None and not self.stopped:
            self.stopped = True
            os.kill(os.getpid(), signal.SIGSTOP)
        return torch.zeros(())


class GoOn(logging.Handler):
    """Continues the stopped worker once the pool has said it waits for it (the user's ``kill -CONT``)."""

    def __init__(self, pid: int) -> None:
        super().__init__(logging.WARNING)
        self.pid = pid
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())
        os.kill(self.pid, signal.SIGCONT)


def test_a_stopped_worker_is_named_while_the_round_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker stopped in a client's code (SIGSTOP, a deadlock) is alive, so the round waited for it with no output at
    all. Now one line names it and its client after STALL_S without a result; the round still ends as usual once the
    worker goes on, with the sequential executor's bits, and the pool stays usable."""
    model = _mlp()
    spec = LocalSpec(epochs=1, batch_size=8, terms=(StopOnce(),))
    jobs = _jobs(model, [9, 7], (3, 4))
    ref = one_thread_reference(model, spec, jobs)
    logger = logging.getLogger("chillfl.executors.processes")
    with WorkerPool(workers=1) as pool:
        pid = pool.pids[0]
        ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8), pool=pool).run(jobs)  # started: its imports are no stall
        monkeypatch.setattr(processes, "STALL_S", 0.6, raising=False)
        go_on = GoOn(pid)
        unstick = threading.Timer(15.0, os.kill, (pid, signal.SIGCONT))  # without a notice the test fails, not hangs
        logger.addHandler(go_on)
        unstick.start()
        try:
            got = ProcessExecutor(model, spec, pool=pool).run(jobs)
        finally:
            logger.removeHandler(go_on)
            unstick.cancel()
            os.kill(pid, signal.SIGCONT)
        assert go_on.seen, "no notice while the round waited for a stopped worker"
        first = go_on.seen[0]
        assert pool.usable
        _assert_identical(ref, got)
        # growing intervals: a pool whose clients are only slow says so a few times, not once a round
        monkeypatch.setattr(processes, "STALL_S", 60.0)
        pool._stall = processes.StallClock()  # a fresh pool's round
        pool._stall.start_round()
        go_on.seen.clear()
        logger.addHandler(go_on)
        try:
            for waited in (59, 60, 61, 119, 120, 200, 240, 10):
                pool._notice_stall(waited)
        finally:
            logger.removeHandler(go_on)
        later = [s.split(";")[0] for s in go_on.seen]
        assert later == [f"no result from the workers for {t} s" for t in (60, 120, 240)], later  # none busy now
    assert re.fullmatch(r"no result from worker chillfl-worker-0 \(client 0\) for \d+ s; the round waits for it with no time "
                        r"limit \(one stopped or stuck in a client's code never replies: two Ctrl-C stop the run\)", first), first
    assert not _alive(pid)


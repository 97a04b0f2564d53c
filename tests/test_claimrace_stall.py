"""A round's stall notices start again at STALL_S in every round (claimrace finding 2).

The processes pool and the Ray executor doubled the wait before each notice for their whole life: in a long sweep on one
pool, a hang in a later round was named only after ``STALL_S * 2**n``, ``n`` the notices of every earlier round."""

from __future__ import annotations

import logging
import os
import signal
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from chillfl.executors import processes
from chillfl.executors.processes import ProcessExecutor, WorkerPool
from chillfl.stop_signals import RaisedLater
from chillfl.training.local import LocalSpec

from test_executors import _assert_identical, _jobs, _mlp, one_thread_reference
from test_workerfail_workers import GoOn, StopOnce


def test_a_hang_after_earlier_notices_is_named_after_stall_s(monkeypatch: pytest.MonkeyPatch) -> None:
    """Six notices in earlier rounds (a slow sweep's), then a round whose worker stops: it is named after STALL_S, not
    after STALL_S * 2**6 (here 0.5 s, not 32 s: the worker is continued at 20 s without a notice, and the test fails)."""
    model = _mlp()
    spec = LocalSpec(epochs=1, batch_size=8, terms=(StopOnce(),))
    jobs = _jobs(model, [9, 7], (3, 4))
    ref = one_thread_reference(model, spec, jobs)
    logger = logging.getLogger("chillfl.executors.processes")
    with WorkerPool(workers=1) as pool:
        pid = pool.pids[0]
        ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8), pool=pool).run(jobs)  # started: its imports are no stall
        monkeypatch.setattr(processes, "STALL_S", 0.5)
        for _ in range(6):
            pool._notice_stall(1e9)  # the earlier rounds' notices
        go_on = GoOn(pid)
        unstick = threading.Timer(20.0, os.kill, (pid, signal.SIGCONT))  # without a notice the test fails, not hangs
        logger.addHandler(go_on)
        unstick.start()
        try:
            got = ProcessExecutor(model, spec, pool=pool).run(jobs)
        finally:
            logger.removeHandler(go_on)
            unstick.cancel()
            os.kill(pid, signal.SIGCONT)
        assert go_on.seen, "the stopped worker was not named: the earlier rounds' notices still doubled the wait"
        assert go_on.seen[0].startswith("no result from worker chillfl-worker-0 (client 0) for "), go_on.seen
        assert pool.usable
        _assert_identical(ref, got)


def test_a_round_that_completes_resets_the_doubling(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Within a round the notices come after 60, 120, 240 s; the round after one that completed starts again at 60 s."""
    model = _mlp()
    jobs = _jobs(model, [9, 7], (3, 4))
    monkeypatch.setattr(processes, "STALL_S", 60.0)
    with WorkerPool(workers=1) as pool, caplog.at_level("WARNING", logger=processes.__name__):
        executor = ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8), pool=pool)
        executor.run(jobs)
        for waited in (60, 119, 120):  # a slow round's notices: at 60 and at 120 s
            pool._notice_stall(waited)
        executor.run(jobs)  # a round completes
        pool._notice_stall(60)  # the next round's first: at 60 s again (it was 240 s)
    said = [r.getMessage().split(";")[0] for r in caplog.records if r.name == processes.__name__]
    assert said == [f"no result from the workers for {t} s" for t in (60, 120, 60)], said


def test_the_ray_executor_starts_every_round_at_stall_s(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Two rounds that stall alike on one executor say the same two notices each: the second round's came no more (its
    first was due after 240 s)."""
    pytest.importorskip("ray")
    import chillfl.executors.ray_executor as ray_executor

    now = [0.0]

    def clock() -> float:
        now[0] += 40.0  # each read of the clock: 40 s later
        return now[0]

    waits = [0]

    class FakeRay:
        exceptions = SimpleNamespace(RayActorError=type("RayActorError", (Exception,), {}), RayTaskError=type("RayTaskError", (Exception,), {}))

        def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
            waits[0] += 1
            if waits[0] == 1:  # actor 0 answers at once, actor 1 not for three more steps
                return [p for p in pending if p == "ref0"], [p for p in pending if p != "ref0"]
            return (pending, []) if waits[0] == 5 else ([], pending)

        def get(self, ref: Any) -> Any:
            return ref

    monkeypatch.setattr(ray_executor, "time", SimpleNamespace(monotonic=clock))
    executor = object.__new__(ray_executor.RayExecutor)
    executor._broken, executor._closed, executor._ray = None, False, FakeRay()
    executor._notices = 0  # type: ignore[attr-defined]  # the old executor's count, which __new__ skipped making
    executor.pool = SimpleNamespace(closed=False)  # type: ignore[assignment]
    items = [SimpleNamespace(client_id=c) for c in (4, 7, 9)]
    with caplog.at_level("WARNING", logger=ray_executor.__name__):
        for _ in range(2):
            waits[0] = 0
            with RaisedLater() as later:
                assert executor._collect({0: "ref0", 1: "ref1"}, items, [[0], [1, 2]], later) == {0: "ref0", 1: "ref1"}
    said = [r.getMessage().split(";")[0] for r in caplog.records]
    # each round: since = actor 0's reply, then 40, 80 and 120 s without a result: notices at 80 s (>= 60) and 120 s (>= 120)
    assert said == [f"no result from Ray worker 1 (clients 7, 9) for {s} s" for s in (80, 120) * 2], said

"""A round's stall notices start afresh in every round, after twice the previous round's longest wait (claimrace finding 2).

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
        warm = ProcessExecutor(model, LocalSpec(epochs=1, batch_size=8), pool=pool)
        warm.run(jobs)  # started: its imports are no stall
        warm.run(jobs)  # and a quick round: the next round's first notice comes after STALL_S (StallClock)
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


def test_the_ray_executor_starts_every_round_afresh(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Three rounds on one executor: the first waits 160 s for actor 1 and says so at 80 and 120 s; the second, as slow,
    says nothing (its first notice is due after twice the first round's longest wait, 320 s); the third, whose actor 1
    hangs for 400 s, is named at 320 s, not hours later (counted over the executor's life, the doubling had reached 240 s
after round 1 and grew with every slow round)."""
    pytest.importorskip("ray")
    import chillfl.executors.ray_executor as ray_executor

    now = [0.0]

    def clock() -> float:
        now[0] += 40.0  # each read of the clock: 40 s later
        return now[0]

    waits, done_at = [0], [5]

    class FakeRay:
        exceptions = SimpleNamespace(RayActorError=type("RayActorError", (Exception,), {}), RayTaskError=type("RayTaskError", (Exception,), {}))

        def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
            waits[0] += 1
            if waits[0] == 1:  # actor 0 answers at once, actor 1 not for three more steps
                return [p for p in pending if p == "ref0"], [p for p in pending if p != "ref0"]
            return (pending, []) if waits[0] == done_at[0] else ([], pending)

        def get(self, ref: Any) -> Any:
            return ref

    monkeypatch.setattr(ray_executor, "time", SimpleNamespace(monotonic=clock))
    executor = object.__new__(ray_executor.RayExecutor)
    executor._broken, executor._closed, executor._ray = None, False, FakeRay()
    executor._stall = processes.StallClock()  # which __new__ skipped making
    executor.pool = SimpleNamespace(closed=False)  # type: ignore[assignment]
    items = [SimpleNamespace(client_id=c) for c in (4, 7, 9)]
    last = [5, 5, 12]  # the wait call that brings actor 1's result, each round
    with caplog.at_level("WARNING", logger=ray_executor.__name__):
        for r in range(3):
            waits[0], done_at[0] = 0, last[r]
            with RaisedLater() as later:
                assert executor._collect({0: "ref0", 1: "ref1"}, items, [[0], [1, 2]], later) == {0: "ref0", 1: "ref1"}
    said = [r.getMessage().split(";")[0] for r in caplog.records]
    # each read of the clock 40 s on; since = after actor 0's reply, then 40, 80, 120, ... s without a result. Round 1:
    # notices at 80 s (>= 60) and 120 s (>= 120), actor 1 answers after 160 s. Round 2: 40-120 s, all under 2 * 160 = 320.
    # Round 3: 40, 80, ..., 400 s: one notice at 320 s (the next was due at 640 s)
    assert said == [f"no result from Ray worker 1 (clients 7, 9) for {s} s" for s in (80, 120, 320)], said


def test_the_stall_clock_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """A round's first notice after twice the previous round's longest wait (at least STALL_S), then doubling; an
    outlier round (a hang the user continued) sets only the next round's."""
    monkeypatch.setattr(processes, "STALL_S", 60.0)
    clock = processes.StallClock()
    clock.start_round()
    assert [w for w in (59, 60, 100, 120, 239, 240) if clock.due(w)] == [60, 120, 240]  # first round: 60, 120, 240
    clock.result(250.0)
    clock.end_round()
    clock.start_round()  # clients that take 250 s: twice that before the first notice
    assert [w for w in (250, 499, 500, 999, 1000) if clock.due(w)] == [500, 1000]
    clock.result(10.0)
    clock.end_round()
    clock.start_round()  # a quick round after: back to 60 s (2 * 10 < 60)
    assert clock.due(60) and not clock.due(100) and clock.due(120)
    clock.result(3000.0)  # a hang continued after 3000 s; no result came in the round from then
    clock.end_round()
    clock.start_round()
    assert not clock.due(5999) and clock.due(6000)
    clock.end_round()  # a round with no result waited for (nothing in it): the next starts at STALL_S
    clock.start_round()
    assert clock.due(60)

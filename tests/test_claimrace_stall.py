"""A round's stall notices start afresh in every round, after twice the previous round's longest wait (claimrace finding 2).

The processes pool and the Ray executor doubled the wait before each notice for their whole life: in a long sweep on one
pool, a hang in a later round was named only after ``STALL_S * 2**n``, ``n`` the notices of every earlier round."""

from __future__ import annotations


import pytest

from chillfl.executors import processes
from chillfl.executors.processes import ProcessExecutor, WorkerPool
from chillfl.training.local import LocalSpec

from test_executors import _jobs, _mlp


def test_a_round_that_completes_resets_the_doubling(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Notices fed after a completed round (as a slow round's would come: at 60 and 120 s) do not carry into the next
    round, whose first comes at 60 s again (it was 240 s). The waits are fed between rounds, through the pool's hook;
    StallClock's own per-round rule is test_the_stall_clock_by_hand's."""
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

"""A stop signal's handler that raises, inside a library's C code that runs it (Ray's ``ray.get``/``ray.wait``):
:class:`~chillfl.stop_signals.RaisedLater` keeps the exception and raises it from Python code, between the waits.

``signal.raise_signal`` stands in for that C code: it runs the handlers itself (``PyErr_CheckSignals``) and hands on
what they raise, as Ray's ``check_signals`` did, which turned the runner's RunInterrupted into SystemErrors
(tests/private_net/test_rayint_signals.py runs the real thing)."""

from __future__ import annotations

import signal
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest

from chillfl.executors.processes import StallClock
from chillfl.runner import RunInterrupted, _Signals

from chillfl.stop_signals import RaisedLater, Repeats


class Stop(Exception):
    pass


@pytest.fixture
def handlers() -> Iterator[Callable[[signal.Signals, Any], object]]:
    """``install(sig, handler)``: this test's handler for ``sig``; every stop signal's handler given back after the test."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield lambda sig, handler: signal.signal(sig, handler)
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_the_handler_runs_at_once_and_its_exception_waits_for_check(handlers: Callable[[signal.Signals, Any], object]) -> None:
    ran: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        ran.append(signum)
        raise Stop(len(ran))

    handlers(signal.SIGINT, handler)
    with RaisedLater() as later:
        signal.raise_signal(signal.SIGINT)  # nothing raised from inside the "C code"
        assert ran == [signal.SIGINT]  # the handler itself was not put off
        signal.raise_signal(signal.SIGINT)
        with pytest.raises(Stop) as caught:
            later.check()
        assert caught.value.args == (1,)  # the first one, as without the deferral
        later.check()  # raised once
    assert signal.getsignal(signal.SIGINT) is handler  # given back


def test_an_exception_not_checked_is_raised_as_the_block_ends(handlers: Callable[[signal.Signals, Any], object]) -> None:
    def handler(signum: int, frame: Any) -> None:
        raise Stop()

    handlers(signal.SIGTERM, handler)
    reached = False
    with pytest.raises(Stop):
        with RaisedLater():
            signal.raise_signal(signal.SIGTERM)
            reached = True
    assert reached and signal.getsignal(signal.SIGTERM) is handler


def test_ignored_signals_stay_ignored(handlers: Callable[[signal.Signals, Any], object]) -> None:
    handlers(signal.SIGTERM, signal.SIG_IGN)
    with RaisedLater():
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        signal.raise_signal(signal.SIGTERM)


def test_the_runners_second_signal_is_raised_by_check_not_inside_the_wait() -> None:
    """The runner's handler in a round (armed): the first SIGINT is acknowledged when it comes, the second one's
    RunInterrupted (at once, in round 3 after 2 done) comes from ``check``."""
    now = [0.0]
    with _Signals(Repeats(clock=lambda: now[0])) as signals:
        signals.done, signals.armed = 2, True
        with RaisedLater() as later:
            signal.raise_signal(signal.SIGINT)
            assert signals.received == signal.SIGINT
            later.check()  # a first signal raises nothing: the run stops after the round
            now[0] += 1.0
            signal.raise_signal(signal.SIGINT)
            with pytest.raises(RunInterrupted) as caught:
                later.check()
    assert caught.value.at_once and caught.value.round == 2 and caught.value.exit_code == 130


def test_the_ray_executor_waits_in_steps_and_raises_between_them(handlers: Callable[[signal.Signals, Any], object]) -> None:
    """``_collect`` with a stand-in Ray whose wait runs the handlers as Ray's C code does: the wait completes, and the
    handler's exception comes from the executor's own code at the end of that step."""
    pytest.importorskip("ray")
    from chillfl.executors.ray_executor import WAIT_STEP_S, RayExecutor

    steps: list[float] = []

    class FakeRay:
        exceptions = SimpleNamespace(RayActorError=type("RayActorError", (Exception,), {}), RayTaskError=type("RayTaskError", (Exception,), {}))

        def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
            assert num_returns == len(pending)
            signal.raise_signal(signal.SIGINT)  # Ray's check_signals, inside its wait
            steps.append(timeout)  # the wait ran to its end: nothing was raised inside it
            return [], pending

        def get(self, ref: Any) -> Any:
            raise AssertionError("a result read after the interruption")

    def handler(signum: int, frame: Any) -> None:
        raise Stop()

    handlers(signal.SIGINT, handler)
    executor = object.__new__(RayExecutor)
    executor._broken, executor._closed, executor._ray, executor._stall = None, False, FakeRay(), StallClock()
    executor.pool = SimpleNamespace(closed=False)  # type: ignore[assignment]
    with pytest.raises(Stop):
        with RaisedLater() as later:
            executor._collect({0: "ref0", 1: "ref1"}, [], [[], []], later)
    assert steps == [WAIT_STEP_S]


def test_the_ray_executor_names_the_actors_a_stalled_round_waits_for(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A stopped or stuck actor is alive, so the round waited in silence: after STALL_S without a result one line names
    the actors still busy and their clients, again after twice as long (as the processes executor's pool says).

    Three rounds on one executor: the first waits 160 s for actor 1 and says so at 80 and 120 s; the second, as slow,
    says nothing (its first notice is due after twice the first round's longest wait, 320 s: StallClock); the third,
    whose actor 1 hangs for 400 s, is named at 320 s (counted over the executor's life, the doubling grew with every
    slow round, and a later hang was named hours late)."""
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
    executor._broken, executor._closed, executor._ray, executor._stall = None, False, FakeRay(), StallClock()
    executor.pool = SimpleNamespace(closed=False)  # type: ignore[assignment]
    items = [SimpleNamespace(client_id=c) for c in (4, 7, 9)]
    with caplog.at_level("WARNING", logger=ray_executor.__name__):
        for last in (5, 5, 12):  # the wait call that brings actor 1's result, each round
            waits[0], done_at[0] = 0, last
            with RaisedLater() as later:
                assert executor._collect({0: "ref0", 1: "ref1"}, items, [[0], [1, 2]], later) == {0: "ref0", 1: "ref1"}
    said = [r.getMessage() for r in caplog.records]
    # each read of the clock 40 s on; since = after actor 0's reply, then 40, 80, 120, ... s without a result. Round 1:
    # notices at 80 s (>= 60) and 120 s (>= 120), actor 1 answers after 160 s. Round 2: 40-120 s, all under 2 * 160 = 320.
    # Round 3: 40, 80, ..., 400 s: one notice at 320 s (the next was due at 640 s)
    assert said == [f"no result from Ray worker 1 (clients 7, 9) for {s} s; the round waits for it with no time limit "
                    "(one stopped or stuck in a client's code never replies: two Ctrl-C stop the run)" for s in (80, 120, 320)], said

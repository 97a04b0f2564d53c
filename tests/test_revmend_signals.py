"""rev111 5: a second stop signal whose handler runs nested in the first's (two signals microseconds apart: Python runs
the handler in the main thread between any two bytecodes, also inside itself) is the second, wherever it lands.

Under the re-entrant lock, the first handler read ``received is None`` and then took the lock to assign it; a second
signal nested in between read None too and counted as the first: two "stopping after this round" lines, ``at_once``
never set, and a third signal needed. These tests call the handler from inside itself at its points of interruption.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from chillfl.flower.apps import SimulationStop  # noqa: E402
from chillfl.stop_signals import Repeats  # noqa: E402

FIRST_LINE = "stopping the Flower run after this round"


class NestingLock:
    """The stop's lock, running ``nested`` (once) the instant the handler holding it has taken it."""

    def __init__(self, real: Any, nested: Any) -> None:
        self.real, self.nested = real, nested

    def __enter__(self) -> None:
        self.real.__enter__()
        nested, self.nested = self.nested, None
        if nested is not None:
            nested()

    def __exit__(self, *exc: object) -> None:
        self.real.__exit__(*exc)


def test_a_second_signal_nested_at_the_first_handlers_lock_stops_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """SIGTERM's handler nested in SIGINT's, where SIGINT's holds the lock: SIGINT is the first, SIGTERM the second."""
    stop = SimulationStop(rounds=3)
    stop._lock = NestingLock(stop._lock, lambda: stop.handle(signal.SIGTERM, None))
    stop.handle(signal.SIGINT, None)
    assert stop.received == signal.SIGINT and stop.at_once.is_set()
    assert capsys.readouterr().err.count(FIRST_LINE) == 1


class NestingRepeats(Repeats):
    """Repeats whose first count runs ``nested`` first: the second signal's handler before the first's reads anything."""

    def __init__(self, nested: Any) -> None:
        super().__init__()
        self.nested = nested

    def counts(self, signum: int) -> bool:
        nested, self.nested = self.nested, None
        if nested is not None:
            nested()
        return super().counts(signum)


def test_a_signal_nested_before_the_first_handler_reads_anything_is_the_first(capsys: pytest.CaptureFixture[str]) -> None:
    """The nested handler runs to its end first, so it is the first signal and the outer one the second."""
    stop = SimulationStop(NestingRepeats(lambda: stop.handle(signal.SIGTERM, None)), rounds=3)
    stop.handle(signal.SIGINT, None)
    assert stop.received == signal.SIGTERM and stop.at_once.is_set()
    assert capsys.readouterr().err.count(FIRST_LINE) == 1


class NestingEvent(threading.Event):
    """``at_once``, running ``nested`` inside its own ``set`` (where a real Event holds its plain lock)."""

    def __init__(self, nested: Any) -> None:
        super().__init__()
        self.nested, self.inside = nested, False

    def set(self) -> None:
        assert not self.inside, "set() entered again inside itself: a real Event waits on its own lock here"
        self.inside = True
        nested, self.nested = self.nested, None
        if nested is not None:
            nested()
        super().set()
        self.inside = False


def test_a_third_signal_nested_in_the_seconds_handler_does_not_wait_on_it(capsys: pytest.CaptureFixture[str]) -> None:
    stop = SimulationStop(rounds=3)
    stop.at_once = NestingEvent(lambda: stop.handle(signal.SIGHUP, None))
    stop.handle(signal.SIGINT, None)
    stop.handle(signal.SIGTERM, None)
    assert stop.received == signal.SIGINT and stop.at_once.is_set()
    assert capsys.readouterr().err.count(FIRST_LINE) == 1

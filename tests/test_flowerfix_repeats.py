"""One stop signal delivered twice (GNU ``timeout``: to the process, then to its process group) is one signal, for a
Flower simulation's stop (:class:`~chillfl.flower.apps.SimulationStop`): the run stops after its round, not at once.
The real double delivery to a simulation is the ``group`` case of tests/private_net/test_flower_signals.py."""

from __future__ import annotations

import signal
from typing import Callable

import pytest

from chillfl.stop_signals import REPEAT_WINDOW_S, SIGINT_REPEAT_WINDOW_S, Repeats


def clock(*times: float) -> Callable[[], float]:
    """A clock that reads ``times``, one per call."""
    return iter(times).__next__


def test_the_same_signal_again_within_the_window_is_the_same_one() -> None:
    repeats = Repeats(clock=clock(10.0, 10.0 + REPEAT_WINDOW_S / 2))
    assert repeats.counts(signal.SIGTERM)
    assert not repeats.counts(signal.SIGTERM)


def test_the_same_signal_later_or_another_signal_counts() -> None:
    later = Repeats(clock=clock(10.0, 10.0 + 2 * REPEAT_WINDOW_S))
    assert later.counts(signal.SIGTERM) and later.counts(signal.SIGTERM)
    other = Repeats(clock=clock(10.0, 10.0))
    assert other.counts(signal.SIGTERM) and other.counts(signal.SIGINT)


def test_repeats_do_not_stretch_the_window() -> None:
    """Measured from the last signal counted: copies every half window do not hide a signal sent a window later."""
    half = REPEAT_WINDOW_S / 2
    repeats = Repeats(clock=clock(0.0, half, 2 * half + 0.01))
    assert [repeats.counts(signal.SIGTERM) for _ in range(3)] == [True, False, True]


def test_a_second_ctrl_c_counts_unless_it_is_a_copy() -> None:
    """A terminal sends Ctrl-C to each process once: a quick second one (a tenth of a second later) is a person's "now";
    ``timeout -s INT``'s copy to the group comes microseconds after the first and is that one."""
    person = Repeats(clock=clock(0.0, 0.1))
    assert [person.counts(signal.SIGINT) for _ in range(2)] == [True, True]
    copy = Repeats(clock=clock(0.0, SIGINT_REPEAT_WINDOW_S / 10))
    assert [copy.counts(signal.SIGINT) for _ in range(2)] == [True, False]


def test_a_flower_simulation_takes_a_sigterm_delivered_twice_as_one(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")
    from chillfl.flower.apps import SimulationStop

    stop = SimulationStop(Repeats(clock=clock(3.0, 3.0)))
    stop.handle(signal.SIGTERM, None)
    stop.handle(signal.SIGTERM, None)  # the process group's copy
    assert stop.received == signal.SIGTERM and not stop.at_once.is_set()
    stop.check()  # nothing to stop at once: the round loop stops after its round
    assert capsys.readouterr().err.count("chillfl: SIGTERM: stopping the Flower run after this round") == 1


def test_a_flower_simulation_stops_at_once_on_a_second_signal() -> None:
    pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")
    from chillfl.flower.apps import SimulationStop

    stop = SimulationStop(Repeats(clock=clock(3.0, 3.0 + 2 * REPEAT_WINDOW_S)))
    stop.handle(signal.SIGTERM, None)
    stop.handle(signal.SIGTERM, None)
    assert stop.at_once.is_set()
    quick = SimulationStop(Repeats(clock=clock(3.0, 3.1)))
    quick.handle(signal.SIGINT, None)
    quick.handle(signal.SIGINT, None)  # a person's second Ctrl-C
    assert quick.at_once.is_set()

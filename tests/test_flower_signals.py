"""The Flower ServerApp's waits end when ``run_simulation`` says so (a second stop signal, or Flower's simulation ended),
not after ``NODE_TIMEOUT_S`` (300 s): a non-daemon ServerApp thread kept the process alive that long after a Ctrl-C.
The whole signal path, with Flower's simulation on Ray, is tests/private_net/test_flower_signals.py."""

from __future__ import annotations

import signal
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from chillfl.executors.processes import WorkerError  # noqa: E402
from chillfl.flower.apps import FlowerExecutor, FlowerRunInterrupted, SimulationStop  # noqa: E402
from chillfl.runner import RunInterrupted  # noqa: E402
from chillfl.stop_signals import Repeats  # noqa: E402


class SilentGrid:
    """A grid whose nodes never answer."""

    pull_interval = 0.01

    def push_messages(self, messages: Any) -> list[str]:
        return [str(i) for i, _ in enumerate(messages)]

    def pull_messages(self, ids: Any) -> list[Any]:
        return []

    def send_and_receive(self, messages: Any, timeout: float) -> list[Any]:
        time.sleep(timeout)
        return []


def _executor(stop: SimulationStop) -> FlowerExecutor:
    executor = FlowerExecutor.__new__(FlowerExecutor)  # without _discover's node query
    executor.grid, executor.timeout, executor.stop, executor.partitions = SilentGrid(), 300.0, stop, {0: 1}
    return executor


def test_the_wait_ends_when_the_simulation_has_ended() -> None:
    """It ends by the stop's word (WorkerError), not at its timeout (which returns no replies: no error)."""
    stop = SimulationStop()
    threading.Timer(0.2, stop.ended.set).start()
    with pytest.raises(WorkerError, match="simulation ended"):
        _executor(stop)._send_and_receive([SimpleNamespace()])


def test_a_second_signal_ends_the_wait_with_run_interrupted(capsys: pytest.CaptureFixture[str]) -> None:
    stop = SimulationStop(Repeats(clock=iter([0.0, 5.0]).__next__))  # the second 5 s after the first: not the first again
    stop.done = 3
    stop.handle(signal.SIGTERM, None)
    stop.handle(signal.SIGTERM, None)  # the second
    with pytest.raises(FlowerRunInterrupted) as caught:
        _executor(stop)._send_and_receive([SimpleNamespace()])
    assert isinstance(caught.value, RunInterrupted) and caught.value.exit_code == 143 and caught.value.folder is None
    assert str(caught.value) == ("interrupted by a second SIGTERM during round 4; "
                                 "a Flower run is not checkpointed: nothing to resume, its partial result folder was removed")
    assert capsys.readouterr().err.count("chillfl: SIGTERM: stopping the Flower run after this round") == 1

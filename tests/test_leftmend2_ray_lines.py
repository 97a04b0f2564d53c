"""The Ray executor says why an actor died, and why Ray would not start, by the error text's LAST line (the exception
itself, after Ray's preamble), the rule chillfl.errors.last_line gives a client's exception and a Flower node's error.
It kept the first: "The actor died unexpectedly before finishing this task." whatever killed the actor.

The errors are Ray's own classes built as Ray builds them (no cluster: an actor killed for real takes tens of seconds)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from chillfl.config import RayConfig
from chillfl.executors.processes import ClientCodeError, StallClock, WorkerError
from chillfl.stop_signals import RaisedLater

ray = pytest.importorskip("ray")

SYSTEM_DEATH = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
                "Worker unexpectedly exits with a connection error code 2. End of file.")


def _system_death(message: str = SYSTEM_DEATH) -> BaseException:
    from ray.core.generated.common_pb2 import ActorDiedErrorContext
    from ray.exceptions import ActorDiedError

    context = ActorDiedErrorContext(error_message=message, class_name="Worker", actor_id=b"\x01" * 16, pid=4242, node_ip_address="127.0.0.1")
    return ActorDiedError(context)


def _creation_failure() -> BaseException:
    from ray.exceptions import ActorDiedError, RayTaskError

    traceback = 'Traceback (most recent call last):\n  File "worker.py", line 3, in __init__\n    import missing_module\nModuleNotFoundError: No module named \'missing_module\''
    return ActorDiedError(RayTaskError("Worker.__init__", traceback, ModuleNotFoundError("No module named 'missing_module'")))


def fake_executor() -> Any:
    """A RayExecutor on no Ray (``_collect`` alone works), on a stand-in pool (``closed``, ``lost``), 3 retries."""
    from chillfl.executors.ray_executor import RayExecutor

    executor = object.__new__(RayExecutor)
    executor._broken, executor._closed, executor._stall = None, False, StallClock()
    executor.pool = SimpleNamespace(closed=False, lost=None)  # type: ignore[assignment]
    executor.options = RayConfig(max_retries=3)
    return executor


def round_error(error: BaseException, executor: Any = None) -> WorkerError:
    """The round's error when actor 1's call raised ``error`` (actor 0's came back), through the executor's ``_collect``
    (``executor``'s, a :func:`fake_executor`; a new one if None)."""

    class FakeRay:
        exceptions = ray.exceptions

        def wait(self, pending: list[Any], num_returns: int, timeout: float) -> tuple[list[Any], list[Any]]:
            return pending, []

        def get(self, ref: Any) -> Any:
            if ref == "ref1":
                raise error
            return ref

    executor = executor if executor is not None else fake_executor()
    executor._ray = FakeRay()
    items = [SimpleNamespace(client_id=c) for c in (4, 7)]
    with pytest.raises(WorkerError) as info, RaisedLater() as later:
        executor._collect({0: "ref0", 1: "ref1"}, items, [[0], [1]], later)
    return info.value


def _lost_line(error: BaseException) -> str:
    """The round's error for a lost worker (resumable: no ClientCodeError), as its text."""
    raised = round_error(error)
    assert not isinstance(raised, ClientCodeError)  # a lost worker: resumable
    return str(raised)


def test_a_dead_actor_is_said_by_why_it_died() -> None:
    assert str(_system_death()).splitlines()[0] == "The actor died unexpectedly before finishing this task."  # Ray's preamble, then its details
    assert _lost_line(_system_death()) == ("Ray worker 1 (clients 7) died and was restarted 3 time(s) without finishing its share; the round was not "
                                           f"aggregated (ActorDiedError: {SYSTEM_DEATH[:200]})")
    assert _lost_line(_creation_failure()).endswith("(ActorDiedError: ModuleNotFoundError: No module named 'missing_module')")


def test_a_long_cause_of_death_is_cut_at_220_characters_on_a_word() -> None:
    """SYSTEM_DEATH (176 characters) is never cut. A 250-character reason is: "ActorDiedError: " and it are 266, cut at
    220 (not the 300 of failure_line's default) after the last whole word in the first 218, then marked "~"."""
    words = [f"word{i:02d}" for i in range(28)]
    message = "The actor is dead because its worker process has died. " + " ".join(words)
    assert len(message) == 250
    # "ActorDiedError: " (16) and the sentence (54) end at 70, before half of 218, so the cut is at a word: 21 words of
    # 7 characters ("wordNN ") fill 71 to 217
    cause = f"ActorDiedError: The actor is dead because its worker process has died. {' '.join(words[:21])} ~"
    assert len(cause) == 219
    assert _lost_line(_system_death(message)).endswith(f"the round was not aggregated ({cause})")


def test_a_start_up_failure_is_said_by_its_last_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ray.init`` raising a text with a preamble (a wrapped exception): the line after it names what failed."""
    import chillfl.executors.ray_executor as ray_executor

    text = ("Failed to connect to the Ray cluster at 10.0.0.9:6379.\nTraceback (most recent call last):\n  File \"client.py\", line 12, in connect\n"
            "ConnectionRefusedError: [Errno 111] Connection refused\n")

    class FakeRay:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kwargs: Any) -> None:
            raise ConnectionError(text)

    monkeypatch.setattr(ray_executor, "import_ray", FakeRay)
    with pytest.raises(WorkerError) as info:
        ray_executor.RayWorkers(RayConfig(address="10.0.0.9:6379"))
    assert str(info.value) == "could not start or reach the Ray cluster at '10.0.0.9:6379': ConnectionError: ConnectionRefusedError: [Errno 111] Connection refused"

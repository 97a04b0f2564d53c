"""Under ``executor = "ray"``:

1. a client's own exception (a loss term raising) was a ClientCodeError naming no client ("Ray worker 1: a client update
   failed: ..."), where the process executor says "client 7: ..." and a Flower node "SuperNode N (client 7): ...": an
   actor's call runs a share of several clients, and nothing said whose update raised;
2. the command line said the client's code "raised in a worker process", where it ran in a Ray actor;
3. an actor out of memory (a MemoryError in it, or Ray's OutOfMemoryError, which escaped as a traceback) left the executor
   usable, so the next round could go to a half-broken actor, where a process worker's MemoryError breaks the pool.

Ray's errors are Ray's own classes built as Ray builds them, through the executor's ``_collect`` on no Ray
(tests/test_leftmend2_ray_lines.py's round_error); one slow test runs the command line on a local Ray."""

from __future__ import annotations

import os
import pickle
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from test_envfix_environment import write_config  # noqa: E402
from test_leftmend2_ray_lines import fake_executor, round_error  # noqa: E402
from test_linefix_lines import _task_error  # noqa: E402

from chillfl.cli import main  # noqa: E402
from chillfl.engine.protocol import ClientTask  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.executors import ray_executor  # noqa: E402
from chillfl.executors.processes import ClientCodeError, WorkerError  # noqa: E402
from chillfl.executors.sequential import SequentialExecutor  # noqa: E402

# ----------------------------------------------------------------------------- 1: the client that raised


class Fails:
    """The actor's private executor, whose client 7 raises ``error`` (client 4's update comes back as 4)."""

    error: BaseException = RuntimeError("boom in the term\nsecond line of the message")

    def __init__(self, model: Any, spec: Any, client: Any = None) -> None:
        pass

    def map(self, tasks: list[Any]) -> list[int]:
        return [self.one(t.client_id) for t in tasks]

    def run(self, jobs: list[Any]) -> list[int]:
        return [self.one(j.client_id) for j in jobs]

    def one(self, client_id: int) -> int:
        if client_id == 7:
            raise self.error
        return client_id


@pytest.fixture
def actor(monkeypatch: pytest.MonkeyPatch) -> tuple[ray_executor.Worker, tuple[Any]]:
    """A Worker actor's object in this process (no Ray: ``ray.get`` gives the run's parts), its executor :class:`Fails`."""

    class Ref:
        def binary(self) -> bytes:
            return b"run"

    monkeypatch.setattr(ray_executor, "SequentialExecutor", Fails)
    monkeypatch.setattr(ray_executor, "pin_worker", lambda model, spec: None)
    monkeypatch.setattr(ray, "get", lambda ref: (None, None, None))
    worker = ray_executor.Worker(0)
    worker.data = {4: "data of 4", 7: "data of 7"}  # type: ignore[dict-item]  # held: no fetch
    return worker, (Ref(),)


def _tasks(*clients: int) -> list[ClientTask[Any, Any]]:
    return [ClientTask(c, 1, None, ray_executor._Ref(f"ref{c}", data=True)) for c in clients]  # type: ignore[arg-type]


def test_an_actor_says_which_clients_update_raised(actor: tuple[ray_executor.Worker, tuple[Any]]) -> None:
    worker, parts = actor
    assert worker.update(parts, _tasks(4)) == [4] and worker.run(parts, [SimpleNamespace(client_id=4)]) == [4]  # type: ignore[list-item]
    for call in (lambda: worker.update(parts, _tasks(4, 7)), lambda: worker.run(parts, [SimpleNamespace(client_id=c) for c in (4, 7)])):  # type: ignore[misc]
        with pytest.raises(ray_executor.ClientFailed) as info:
            call()
        # was: the RuntimeError itself, which said no client
        assert (info.value.client_id, info.value.said) == (7, "RuntimeError: boom in the term")
        assert isinstance(info.value.__cause__, RuntimeError)  # its traceback stays in Ray's task error
    back = pickle.loads(pickle.dumps(info.value))  # as Ray hands it to the driver
    assert (type(back), back.client_id, back.said, str(back)) == (ray_executor.ClientFailed, 7, "RuntimeError: boom in the term",
                                                                  "client 7: RuntimeError: boom in the term")


def test_an_allocation_failure_passes_as_it_is(actor: tuple[ray_executor.Worker, tuple[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """A MemoryError is a lost worker's (3), not a client's own failure."""
    worker, parts = actor
    error = MemoryError("you tried to allocate 8 bytes")
    monkeypatch.setattr(Fails, "error", error)
    with pytest.raises(MemoryError) as info:
        worker.update(parts, _tasks(7))
    assert info.value is error


def test_bad_input_travels_with_its_client(actor: tuple[ray_executor.Worker, tuple[Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input is the run's exit 2 (the driver raises the ConfigError itself), carried with the client whose job met it,
    so that the driver raises the first failing job's error as a serial run does."""
    worker, parts = actor
    error = ConfigError("objective.terms", "needs a context key")
    monkeypatch.setattr(Fails, "error", error)
    with pytest.raises(ray_executor.ClientFailed) as info:
        worker.update(parts, _tasks(7))
    assert (info.value.client_id, info.value.refused) == (7, error)
    back = pickle.loads(pickle.dumps(info.value))  # as Ray hands it to the driver
    assert (back.client_id, type(back.refused), str(back.refused)) == (7, ConfigError, str(error))


def test_the_round_names_the_client_and_where_it_ran() -> None:
    raised = round_error(_task_error(ray_executor.ClientFailed(7, "RuntimeError: boom in the term")))
    assert type(raised) is ClientCodeError
    assert str(raised) == "Ray worker 1 (client 7): a client update failed: RuntimeError: boom in the term"  # as a Flower node's
    assert raised.ran_in == "a Ray actor"
    # raised outside a client's own update (the run's parts would not load): the share's clients
    assert str(round_error(_task_error(RuntimeError("bad parts")))) == ("Ray worker 1 (clients 7): a client update failed: "
                                                                       "RayTaskError(RuntimeError): bad parts")


# ----------------------------------------------------------------------------- 2: the command line's line


@pytest.mark.parametrize(("ran_in", "where"), [({}, "a worker process"), ({"ran_in": "a Ray actor"}, "a Ray actor")])
def test_the_command_line_says_where_the_clients_code_ran(ran_in: dict[str, str], where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    def map_(self: SequentialExecutor, tasks: Any) -> Any:
        raise ClientCodeError("Ray worker 0 (client 1): a client update failed: RuntimeError: boom", **ran_in)

    monkeypatch.setattr(SequentialExecutor, "map", map_)
    assert main(["run", str(write_config(tmp_path)), "-q"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1] == (f"chillfl: error: the client's code raised in {where} (no worker was lost): "
                                                                "Ray worker 0 (client 1): a client update failed: RuntimeError: boom")
    back = pickle.loads(pickle.dumps(ClientCodeError("x", **ran_in)))  # a comparison's run hands it on
    assert (str(back), back.ran_in) == ("x", where)


# ----------------------------------------------------------------------------- 3: out of memory


OOM = "Task was killed due to the node running low on memory.\nMemory on the node (IP: 127.0.0.1) was 7.60GB / 8.00GB (0.95)"
"""Ray's OutOfMemoryError text (its memory monitor killed the call's worker), cut short."""

ALLOC = "[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes."


@pytest.mark.parametrize(("error", "said"), [
    (_task_error(MemoryError(ALLOC)), f"RayTaskError(MemoryError): {ALLOC}"),
    (ray.exceptions.OutOfMemoryError(OOM), "OutOfMemoryError: Task was killed due to the node running low on memory."),
], ids=["MemoryError", "OutOfMemoryError"])
def test_an_actor_out_of_memory_ends_the_executor_as_a_process_workers(error: BaseException, said: str) -> None:
    executor = fake_executor()
    lost = round_error(error, executor)
    line = (f"Ray worker 1 (clients 7) ran out of memory ({said}); the run can go on after freeing memory or with fewer workers, "
            "unless one client alone needs more than the machine has")
    assert type(lost) is WorkerError and str(lost) == line  # a lost worker's: the run stops resumable, not failed
    assert executor.pool.lost == line  # the pool is replaced before the next run (WorkerPools reads usable)
    again = round_error(RuntimeError("never asked"), executor)  # the next round: no call reaches an actor
    assert type(again) is WorkerError and str(again) == f"the Ray executor is unusable: {line}"


# ----------------------------------------------------------------------------- 1 and 2 on a local Ray


class TermBoom:
    """A loss term whose own code raises (tests/test_leftmend2_flower_failures.py's, here: the actors import it from here)."""

    reads = ()

    def __call__(self, params: Any, context: Any) -> Any:
        raise RuntimeError("boom in the term")


def _own_raylets() -> list[str]:
    """This process's raylet children (another session's local Ray on this machine is not ours)."""
    found = subprocess.run(["pgrep", "-P", str(os.getpid()), "-f", "raylet"], capture_output=True, text=True, check=False).stdout
    return found.split()


def test_a_ray_run_names_the_client_and_the_actor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # a local Ray of its own, stopped with the run
    config = write_config(tmp_path, executor="ray", ray={"workers": 1}, objective={"terms": [f"{__name__}:TermBoom"]})
    assert main(["run", str(config), "-q"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    # both clients are sampled in round 1 (sample_clients sorts them: jobs [0, 1]); the one actor runs job 0 first, and
    # its client 0 raises there: the line names client 0, not whichever client the actor happened to fail on
    assert re.fullmatch(r"chillfl: error: the client's code raised in a Ray actor \(no worker was lost\): Ray worker 0 \(client 0\): "
                        r"a client update failed: RuntimeError: boom in the term", last), last
    assert _own_raylets() == []  # the local Ray went with the run

"""The line that says what failed (chillfl.errors.failure_line), the texts of rev114a's findings 1-3.

1. The "last line" rule gave a tip, a note or a detail line where Ray's or torch's text has several lines: a Ray version
   mismatch said ``RuntimeError:     Python: 3.11.7``, torch's device-side assert ``Compile with `TORCH_USE_CUDA_DSA` ...``,
   an exception with a PEP 678 note only the note, a dead actor with no error message ``\\tip: 127.0.0.1``, and a cut at
   200 characters ended a real worker death mid-word.
2. Under Flower a node's MemoryError was the client's own failure (ClientCodeError, "a client update failed: MemoryError"),
   under Ray too, where the process executor says a lost worker "ran out of memory" (WorkerError, resumable).
3. Flower's ClientCodeError named every client of the node ("clients 0, 2"), not the one whose update raised.

Ray's errors are Ray's own classes built as Ray builds them (no cluster), its version mismatch Ray's own function's; the
Flower runs are tests/test_leftmend2_flower_failures.py's in-process simulation (no Ray)."""

from __future__ import annotations

import re
import traceback
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import pytest
import torch

from chillfl.config import RayConfig, load_config
from chillfl.errors import CUT, failure_line
from chillfl.executors.processes import ClientCodeError, WorkerError

DSA = ("CUDA error: device-side assert triggered\nCUDA kernel errors might be asynchronously reported at some other API call, so the "
       "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
       "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
"""torch's message for a device-side assert (a label out of range on a GPU): the summary first, then tips."""

NUMPY = ("\n\nIMPORTANT: PLEASE READ THIS FOR ADVICE ON HOW TO SOLVE THIS ISSUE!\n\nImporting the numpy C-extensions failed. This error "
         "can happen for\nmany reasons, often due to issues with your setup or with how NumPy was\ninstalled.\n\n"
         "Original error was: No module named 'numpy.core._multiarray_umath'\n")

DEATH = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly "
         "exits with a connection error code 2. End of file. Some common causes include: (1) the process was killed by the OOM killer "
         "due to high memory usage, (2) ray stop --force was called, or (3) the worker crashed unexpectedly due to SIGSEGV or other "
         "unexpected errors.")
"""A real actor's death by ``os._exit`` (Ray 2.55's text)."""


def _noted() -> ModuleNotFoundError:
    error = ModuleNotFoundError("No module named 'torchvision'")
    error.add_note("install chillfl[vision]")
    return error


def _traceback_of(error: BaseException) -> str:
    try:
        raise error
    except BaseException:  # noqa: BLE001 - its traceback text, as Ray keeps it
        return traceback.format_exc()


# ----------------------------------------------------------------------------- 1: the rule on each text


def test_a_message_is_said_by_its_first_line_and_its_type() -> None:
    assert failure_line(RuntimeError(DSA)) == "RuntimeError: CUDA error: device-side assert triggered"  # was: Compile with ...
    assert failure_line(_noted()) == "ModuleNotFoundError: No module named 'torchvision'"  # was: install chillfl[vision]
    assert failure_line(ImportError(NUMPY)) == "ImportError: IMPORTANT: PLEASE READ THIS FOR ADVICE ON HOW TO SOLVE THIS ISSUE!"
    assert failure_line(MemoryError()) == "MemoryError" and failure_line(RuntimeError("boom")) == "RuntimeError: boom"


def test_a_traceback_is_said_by_its_exception_line_not_its_note() -> None:
    text = _traceback_of(_noted())
    assert text.rstrip().splitlines()[-1] == "install chillfl[vision]"  # the note follows the exception's line
    assert failure_line(text) == "ModuleNotFoundError: No module named 'torchvision'"
    assert failure_line(_traceback_of(RuntimeError(DSA))) == "RuntimeError: CUDA error: device-side assert triggered"


def test_a_line_ending_with_a_colon_is_said_with_the_lines_it_introduces() -> None:
    ray = pytest.importorskip("ray")
    from ray._private.utils import check_version_info

    with pytest.raises(RuntimeError) as info:
        check_version_info({"ray_version": "2.9.3", "python_version": "3.10.12"}, "10.0.0.9")
    said = failure_line(info.value)
    assert said.startswith("RuntimeError: Version mismatch: The cluster was started with: Ray: 2.9.3 Python: 3.10.12 "
                           f"This process on 10.0.0.9 was started with: Ray: {ray.__version__} Python: "), said


def test_a_cut_ends_at_a_sentence_or_a_word_and_is_marked() -> None:
    words = "word " * 100
    assert failure_line(words, 23) == f"word word word word {CUT}"  # 20 characters kept, then the mark: 22 <= 23
    said = failure_line(DEATH, 200)
    assert said == (f"{DEATH.split(' Some common')[0]} {CUT}")  # ends "... error code 2. End of file. ~"
    assert len(said) <= 200 and len(failure_line("x" * 400)) == 300


# ----------------------------------------------------------------------------- 1: through the Ray executor


ray_exceptions = pytest.importorskip("ray.exceptions")
from test_leftmend2_ray_lines import round_error  # noqa: E402


def _context_death(message: str) -> BaseException:
    from ray.core.generated.common_pb2 import ActorDiedErrorContext

    context = ActorDiedErrorContext(error_message=message, class_name="Worker", actor_id=b"\x01" * 16, pid=4242, node_ip_address="127.0.0.1")
    return ray_exceptions.ActorDiedError(context)


def _task_error(cause: BaseException) -> BaseException:
    """A client update's exception as a Ray task raises it (``ray.get``)."""
    return ray_exceptions.RayTaskError("Worker.run", _traceback_of(cause), cause, proctitle="ray::Worker.run", pid=4242, ip="127.0.0.1")


_round_error = round_error  # the round's error when actor 1's call raised it (test_leftmend2_ray_lines)


def test_a_ray_client_failure_is_said_by_its_exception_not_its_tips() -> None:
    error = _round_error(_task_error(RuntimeError(DSA)))
    assert type(error) is ClientCodeError
    assert str(error) == "Ray worker 1 (clients 7): a client update failed: RayTaskError(RuntimeError): CUDA error: device-side assert triggered"
    noted = _round_error(_task_error(_noted()))
    assert str(noted) == "Ray worker 1 (clients 7): a client update failed: RayTaskError(ModuleNotFoundError): No module named 'torchvision'"


def test_a_dead_actor_is_said_by_its_exception_or_its_preamble_never_a_detail() -> None:
    lead = "Ray worker 1 (clients 7) died and was restarted 3 time(s) without finishing its share; the round was not aggregated"
    created = ray_exceptions.ActorDiedError(_task_error(_noted()))  # its __init__ raised, with a note
    assert str(_round_error(created)) == f"{lead} (ActorDiedError: ModuleNotFoundError: No module named 'torchvision')"  # was: the note
    assert str(_round_error(_context_death(""))) == f"{lead} (ActorDiedError: The actor died unexpectedly before finishing this task.)"  # was: \tip: ...
    assert str(_round_error(_context_death(DEATH))) == (f"{lead} (ActorDiedError: The actor is dead because its worker process has died. Worker "
                                                        "exit type: SYSTEM_ERROR Worker exit detail: Worker unexpectedly exits with a connection "
                                                        f"error code 2. End of file. {CUT})")  # was: ... Some common causes incl


def test_a_ray_version_mismatch_says_it_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.executors.ray_executor as ray_executor
    from ray._private.utils import check_version_info

    class FakeRay:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kwargs: Any) -> None:
            check_version_info({"ray_version": "2.9.3", "python_version": "3.10.12"}, "10.0.0.9")

    monkeypatch.setattr(ray_executor, "import_ray", FakeRay)
    with pytest.raises(WorkerError) as info:
        ray_executor.RayWorkers(RayConfig(address="10.0.0.9:6379"))
    assert str(info.value).startswith("could not start or reach the Ray cluster at '10.0.0.9:6379': RuntimeError: Version mismatch: "
                                      "The cluster was started with: Ray: 2.9.3 Python: 3.10.12 This process on 10.0.0.9 was started with:")


# ----------------------------------------------------------------------------- 2: out of memory under Ray


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: "
                                                                "can't allocate memory: you tried to allocate 4000000000000 bytes. Error code 12 (Cannot allocate memory)")])
def test_a_ray_worker_out_of_memory_is_a_lost_worker(error: BaseException) -> None:
    lost = _round_error(_task_error(error))
    assert type(lost) is WorkerError  # not ClientCodeError: a comparison stops, resumable, as under the process executor
    said = failure_line(error, kind=f"RayTaskError({type(error).__name__})")
    assert str(lost) == (f"Ray worker 1 (clients 7) ran out of memory ({said}); the run can go on after freeing memory or with fewer workers, "
                         "unless one client alone needs more than the machine has")


# ----------------------------------------------------------------------------- 1-3: under Flower

flwr = pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from flwr.app import Message, RecordDict  # noqa: E402
from test_flower_privacy_attacks import NODES, InProcessGrid, server_identity  # noqa: E402,F401  (a fixture)
from test_flowerfix_messages import FlowerLikeGrid  # noqa: E402
from test_flowerfix_server_runs import SimulationGrid, _config, in_process  # noqa: E402,F401  (a fixture)

from chillfl.engine.protocol import ClientTask  # noqa: E402
from chillfl.flower import client_app, run_simulation  # noqa: E402
from chillfl.flower.apps import ClientRuntime, FlowerExecutor, error_line  # noqa: E402
from chillfl.flower.wire import ClientFailure, decode, encode  # noqa: E402


@pytest.fixture
def nodes(request: pytest.FixtureRequest) -> list[type[SimulationGrid]]:
    used: list[type[SimulationGrid]] = request.getfixturevalue("in_process")
    used[0] = FlowerLikeGrid
    return used


class TermDSA:
    """A loss term that raises torch's device-side assert (a label out of range on a GPU)."""

    reads = ()

    def __call__(self, params: Any, context: Any) -> torch.Tensor:
        raise RuntimeError(DSA)


class TermOOM:
    reads = ()

    def __call__(self, params: Any, context: Any) -> torch.Tensor:
        raise MemoryError()


def test_a_nodes_client_failure_is_said_by_its_summary_and_its_client(tmp_path: Path, nodes: list[type[SimulationGrid]]) -> None:
    with pytest.raises(ClientCodeError) as info:
        run_simulation(_config(tmp_path, objective={"terms": [f"{__name__}:TermDSA"]}), num_supernodes=NODES)
    assert re.fullmatch(r"SuperNode \S+ \(client \d+\): a client update failed: RuntimeError: CUDA error: device-side assert triggered", str(info.value)), str(info.value)


def test_a_nodes_memory_error_is_a_lost_worker(tmp_path: Path, nodes: list[type[SimulationGrid]]) -> None:
    with pytest.raises(WorkerError) as info:
        run_simulation(_config(tmp_path, objective={"terms": [f"{__name__}:TermOOM"]}), num_supernodes=NODES)
    assert not isinstance(info.value, ClientCodeError)
    assert re.fullmatch(r"SuperNode \S+ ran out of memory in client \d+'s update \(MemoryError\); the round was not aggregated: free memory on "
                        r"that node or give it fewer clients, unless one client alone needs more than it has", str(info.value)), str(info.value)


class OneClientRaises:
    """A node's executor whose client 2's update raises (clients 0 and 4 train)."""

    def map(self, tasks: Sequence[ClientTask[Any, Any]]) -> list[Any]:
        if any(t.client_id == 2 for t in tasks):
            raise ValueError("bad batch")
        return [SimpleNamespace(client_id=t.client_id, state=None) for t in tasks]


def test_a_node_names_the_client_whose_update_raised() -> None:
    runtime = ClientRuntime(load_config(None, {}))
    runtime.parts.update(executor=OneClientRaises(), evaluation=SimpleNamespace(client_data=lambda cid: None), device=torch.device("cpu"))
    tasks = [ClientTask(client_id=c, round=1, downlink=None, data=None) for c in (0, 2, 4)]  # type: ignore[arg-type]
    assert decode(runtime.train(encode(tasks), RecordDict()))["failed"] == ClientFailure("ValueError: bad batch", 2, False)


class FailingGrid(InProcessGrid):
    """A node that says its client 2's update raised (clients 0 and 2 on it)."""

    def send_and_receive(self, messages: Sequence[Message], timeout: float | None = None) -> list[Message]:
        if not any(m.metadata.message_type == "train" for m in messages):
            return super().send_and_receive(messages, timeout)
        return [Message(encode({"failed": ClientFailure("ValueError: bad batch", 2)}), reply_to=m) for m in messages]


@pytest.mark.usefixtures("server_identity")
def test_the_server_names_the_client_a_node_says_raised() -> None:
    tasks = [ClientTask(client_id=c, round=1, downlink=None, data=None) for c in (0, 2)]  # type: ignore[arg-type]
    with pytest.raises(ClientCodeError) as info:
        FlowerExecutor(FailingGrid(client_app(load_config(None, {})), 1), min_nodes=1, timeout=5.0).map(tasks)
    assert re.fullmatch(r"SuperNode \S+ \(client 2\): a client update failed: ValueError: bad batch", str(info.value)), str(info.value)


@pytest.mark.parametrize(("reason", "said"), [
    (f"<class 'RuntimeError'>:<'{DSA}'>", "RuntimeError: CUDA error: device-side assert triggered"),  # a deployed node's: was Compile with ...
    (f"<class 'ray.exceptions.RayTaskError(ClientAppException)'>:<'{_traceback_of(_noted())}\nThe above exception was the direct cause of "
     "the following exception:\n\nray::ClientAppActor.run()\nflwr.clientapp.client_app.ClientAppException: \nException ClientAppException "
     "occurred. Message: No module named 'torchvision'\n'>", "ModuleNotFoundError: No module named 'torchvision'"),  # was: the note
])
def test_a_flower_reason_is_said_by_its_exception(reason: str, said: str) -> None:
    assert error_line(reason) == said

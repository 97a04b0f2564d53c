"""Under Flower, a client's own exception (raised in its training code on a node) is raised by the server as a
:class:`~chillfl.executors.processes.ClientCodeError`, as the Ray and process executors raise a worker's; a lost node (an
error reply) stays a :class:`~chillfl.executors.processes.WorkerError`. Both came back as Flower's error reply before, so
a client's bug was said as a lost worker.

The runs use the in-process simulation of tests/test_flowerfix_server_runs.py (no Ray), whose grid turns a ClientApp's
exception into an error reply as Flower's engine does (tests/test_flowerfix_messages.py's FlowerLikeGrid)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import pytest
import torch

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from flwr.app import Error, Message  # noqa: E402
from test_flower_privacy_attacks import NODES, server_identity  # noqa: E402,F401  (a fixture)
from test_flowerfix_messages import FlowerLikeGrid  # noqa: E402
from test_flowerfix_server_runs import SimulationGrid, _config, in_process  # noqa: E402,F401  (a fixture)

from chillfl.executors.processes import ClientCodeError, WorkerError  # noqa: E402
from chillfl.flower import run_simulation  # noqa: E402
from chillfl.flower.wire import ClientFailure, decode, encode  # noqa: E402


@pytest.fixture
def nodes(request: pytest.FixtureRequest) -> list[type[SimulationGrid]]:
    """tests/test_flowerfix_server_runs.py's in-process simulation: the list's grid class is the one used."""
    used: list[type[SimulationGrid]] = request.getfixturevalue("in_process")
    return used


class TermBoom:
    """A loss term whose own code raises: the client's bug, not bad input (no ConfigError) and no lost node."""

    reads = ()

    def __call__(self, params: Any, context: Any) -> torch.Tensor:
        raise RuntimeError("boom in the term")


def test_a_clients_own_exception_is_a_client_code_error(tmp_path: Path, nodes: list[type[SimulationGrid]], caplog: pytest.LogCaptureFixture) -> None:
    nodes[0] = FlowerLikeGrid
    with pytest.raises(ClientCodeError) as info:
        run_simulation(_config(tmp_path, objective={"terms": [f"{__name__}:TermBoom"]}), num_supernodes=NODES)
    line = str(info.value)
    assert re.fullmatch(r"SuperNode \S+ \(client \d+\): a client update failed: RuntimeError: boom in the term", line), line
    assert info.value.ran_in == "a Flower SuperNode"  # the command line's "raised in ...": not a worker process
    assert any(r.exc_info and "boom in the term" in str(r.exc_info[1]) for r in caplog.records)  # the node logged its traceback


def test_a_lost_node_stays_a_worker_error(tmp_path: Path, nodes: list[type[SimulationGrid]]) -> None:
    """An error reply (the node itself failed) is a lost worker's, also where another node's client code raised: a
    round with a lost worker is a lost worker's, as the Ray executor's with a dead actor."""

    class OneLost(FlowerLikeGrid):
        def send_and_receive(self, messages: Sequence[Message], timeout: float | None = None) -> list[Message]:
            if not any(m.metadata.message_type == "train" for m in messages):
                return super().send_and_receive(messages, timeout)
            last = max(m.metadata.dst_node_id for m in messages)  # the highest partition's node lost, the others' clients failed
            return [Message(Error(code=5, reason="node unavailable"), reply_to=m) if m.metadata.dst_node_id == last else
                    Message(encode({"failed": ClientFailure("RuntimeError: boom")}), reply_to=m) for m in messages]

    nodes[0] = OneLost
    with pytest.raises(WorkerError) as info:
        run_simulation(_config(tmp_path), num_supernodes=NODES)
    assert not isinstance(info.value, ClientCodeError)
    assert "failed a client update: node unavailable; the round was not aggregated" in str(info.value)


def test_a_client_failure_travels_as_a_registered_message() -> None:
    assert decode(encode({"failed": ClientFailure("ValueError: x")}))["failed"] == ClientFailure("ValueError: x")

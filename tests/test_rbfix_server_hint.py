"""A non-finite client loss names the server's step only where it can be the cause (rev101b finding 1).

Plain FedAvg with a client.lr far too high blows every client's model up in round 1: its global model's loss is not
finite too, but averaging took no server step, and the hint used to send the user to ``algorithm.server_lr``, an option
FedAvg refuses. The server's step is blamed only when the clients' own models were finite and the global one was not
(measured: ``eval.clients`` other than "none").
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from chillfl.data import FederatedData
from chillfl.errors import LOSS_HINT, Diverged
from chillfl.experiment import build_data
from chillfl.protocols.book import ServerBook
from chillfl.runner import run_experiment
from test_pa3fed_e2e import tiny_config

MEASURED = {"federation.rounds": 3, "model.name": "mlp", "eval.clients": "sampled"}
"""The clients measure their own models (the signal that tells a server step from a client step)."""


@pytest.fixture(scope="module")
def data() -> FederatedData:
    return build_data(tiny_config({"name": "fedavg"}, **MEASURED))


def _diverged(algorithm: dict[str, Any], data: FederatedData, **extra: Any) -> str:
    cfg = tiny_config(algorithm, **{**MEASURED, **extra})
    with pytest.raises(Diverged) as caught:
        run_experiment(cfg, data=data, write=False, progress=False)
    return str(caught.value)


def test_fedavg_with_a_huge_client_lr_names_client_lr_alone(data: FederatedData) -> None:
    said = _diverged({"name": "fedavg"}, data, **{"client.lr": 1e25, "client.batch_size": 4096})  # one step: round 1 trains
    assert said.startswith("round 2, "), said
    assert said.endswith(f"({LOSS_HINT})"), said
    assert "server" not in said


def test_a_server_lr_the_run_sets_is_named(data: FederatedData) -> None:
    said = _diverged({"name": "fedadam", "server_lr": 1e30}, data)
    assert "round 2, " in said and "after round 1" in said and said.endswith("lower algorithm.server_lr)")
    assert "\n" not in said


def test_a_method_without_server_step_options_gets_the_plain_hint() -> None:
    """Plain averaging has no server-side step options: a blown-up global model is not sent to options it lacks
    (the hint once said "lower the aggregator's server-side step options" for FedAvg too)."""
    book = ServerBook.__new__(ServerBook)  # only the parts server_step reads
    off = SimpleNamespace(enabled=False)
    book.evaluation = cast(Any, SimpleNamespace(config=SimpleNamespace(algorithm={"name": "fedavg"}, privacy=off, attack=off)))
    book.blown_after = None
    assert book.server_step() is None
    book.blown_after = 0
    assert book.server_step() is None
    assert book.hint() == LOSS_HINT

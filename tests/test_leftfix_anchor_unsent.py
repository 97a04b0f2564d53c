"""An ``[objective]`` anchor (``proximal_mu``) reads the server's model the round started from, every entry of it.
Where the aggregator sends a client values of its own (``Downlink.params``: FedMut's mutated model, FedExP's iterate
under ``average_last_two``), the anchor's entries there were never sent, yet the anchor was free ("the global model
was sent"): bytes_down now prices them. The anchor stays the server's model (FedMut's is the unmutated one,
docs/pa3fed.md): the pricing changes no number but the bytes."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import chillfl
from chillfl.protocols import parameters
from test_commfix_traffic import CLIENTS, MODEL, ROUNDS, Tiny, data, without_bytes  # noqa: F401

__all__ = ["data"]

OWN_STARTS = [("fedexp", {"average_last_two": True}), ("fedmut", {}), ("pfedsim", {"warmup": 0})]
"""Aggregators whose downlink replaces every entry of the start from round 2 on (round 1: the global model); pFedSim's
is the client's personalised model, its head the client's own (held): priced once, as the anchor the client reads."""


def _run(name: str, data: chillfl.TensorData, mu: float, options: dict[str, Any]) -> list[dict[str, Any]]:
    config = {
        "seed": 1, "device": "cpu", "threads": 1, "executor": "sequential",
        "federation": {"num_clients": CLIENTS, "clients_per_round": CLIENTS, "rounds": ROUNDS},
        "client": {"lr": 0.05, "batch_size": 16, "epochs": 1}, "eval": {"client_split_size": 5, "clients": "all"},
        "algorithm": {"name": name, **options}, "objective": {"proximal_mu": mu},
    }
    torch.manual_seed(0)
    return chillfl.run(model=Tiny(), data=data, config=config, write=False, progress=False).records


@pytest.mark.parametrize(("name", "options"), OWN_STARTS)
def test_the_anchor_entries_a_client_was_not_sent_are_priced(name: str, options: dict[str, Any], data: chillfl.TensorData) -> None:
    """Per round, the anchored run's downlink is the plain run's plus mu (8 bytes) per client, and from round 2 on
    (when the start is the method's own) the server's model the anchor reads (:data:`MODEL` bytes) per client."""
    plain, anchored = _run(name, data, 0.0, options), _run(name, data, 0.1, options)
    extra = [b["bytes_down"] - a["bytes_down"] for a, b in zip(plain, anchored)]
    assert extra == [8 * CLIENTS] + [(8 + MODEL) * CLIENTS] * (ROUNDS - 1)


@pytest.mark.parametrize(("name", "options"), OWN_STARTS)
def test_pricing_the_anchor_changes_no_number_but_the_bytes(name: str, options: dict[str, Any], data: chillfl.TensorData,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    priced = _run(name, data, 0.1, options)
    monkeypatch.setattr(parameters, "anchor_unsent", lambda state, params, reads=None: {})
    free = _run(name, data, 0.1, options)
    assert without_bytes(priced) == without_bytes(free)
    assert sum(r["bytes_down"] for r in priced) - sum(r["bytes_down"] for r in free) == MODEL * CLIENTS * (ROUNDS - 1)


def test_an_entry_sent_with_the_servers_value_is_not_priced_again() -> None:
    from chillfl.protocols.parameters import anchor_unsent

    state = {"a": torch.ones(3), "b": torch.zeros(2), "c": torch.ones(1)}
    sent = {"a": state["a"], "b": torch.zeros(2), "c": torch.full((1,), 2.0)}  # the same tensor, an equal copy, another value
    assert anchor_unsent(state, sent).keys() == {"c"} and anchor_unsent(state, sent)["c"] is state["c"]
    assert anchor_unsent(state, None) == {} and anchor_unsent(state, {"d": torch.ones(1)}) == {}

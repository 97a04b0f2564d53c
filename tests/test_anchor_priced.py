"""An ``[objective]`` anchor (``proximal_mu``) reads the server's start model, every entry of it. A returning FedFomo
client's global model, and FedPer's / LG-FedAvg's kept entries, were marked held (unpriced) while the proximal term
read the server's values of them: bytes_down counted none of it. Those entries are priced when an anchor is on."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import pytest
import torch

import chillfl
from chillfl.protocols.parameters import ParameterSharing
from test_commfix_traffic import CLIENTS, MODEL, ROUNDS, Tiny, data, without_bytes  # noqa: F401

__all__ = ["data"]


def _run(name: str, data: chillfl.TensorData, mu: float) -> list[dict[str, Any]]:
    config = {
        "seed": 1, "device": "cpu", "threads": 1, "executor": "sequential",
        "federation": {"num_clients": CLIENTS, "clients_per_round": 2, "rounds": ROUNDS},
        "client": {"lr": 0.05, "batch_size": 16, "epochs": 1}, "eval": {"client_split_size": 5, "clients": "all"},
        "algorithm": {"name": name}, "objective": {"proximal_mu": mu},
    }
    torch.manual_seed(0)
    return chillfl.run(model=Tiny(), data=data, config=config, write=False, progress=False).records


def _poison_held_anchor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Move by 7 the anchor's entries a downlink marks held: a client that never reads them runs the same."""
    configure: Callable[..., Any] = ParameterSharing.configure

    def poisoning(self: ParameterSharing, round: int, sampled: Any) -> Any:
        out = []
        for t in configure(self, round, sampled):
            d = t.downlink
            context = {k: ({n: v + 7.0 if n in d.held else v for n, v in val.items()} if k in self.anchors else val)
                       for k, val in d.context.items()}
            out.append(replace(t, downlink=replace(d, context=context)))
        return out

    monkeypatch.setattr(ParameterSharing, "configure", poisoning)


@pytest.mark.parametrize("name", ["fedfomo", "fedper", "lg_fedavg"])
def test_what_an_anchor_reads_is_not_held(name: str, data: chillfl.TensorData, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = without_bytes(_run(name, data, 0.1))
    _poison_held_anchor(monkeypatch)
    assert without_bytes(_run(name, data, 0.1)) == plain


def test_a_returning_fedfomo_client_pays_for_the_global_model_its_proximal_term_reads(data: chillfl.TensorData) -> None:
    """Per round, the anchored run's downlink is the plain run's plus mu (8 bytes) for each client and the global
    model for each returning one (the plain run does not send it to them)."""
    plain, anchored = _run("fedfomo", data, 0.0), _run("fedfomo", data, 0.1)
    seen: set[int] = set()
    for a, b in zip(plain, anchored):
        assert a["clients"] == b["clients"]
        returning = sum(1 for c in b["clients"] if c in seen)
        seen.update(b["clients"])
        assert b["bytes_down"] - a["bytes_down"] == 8 * len(b["clients"]) + returning * MODEL
    assert len(seen) < 2 * ROUNDS  # some client returned: the check above priced a global model

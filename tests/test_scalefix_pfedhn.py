"""pFedHN's server step holds one client's chain-rule gradient at a time, not one per sampled client.

Each gradient is as large as the hypernetwork, the whole embedding table included (97 MB a client at 10,000 clients);
kept in a list, a round of 40 clients held 4.9 GB. The bits are the list's (a running sum in the same order).
"""

from __future__ import annotations

import weakref
from typing import Any, Literal

import pytest
import torch

from chillfl.aggregation import pfedhn
from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.pfedhn import EMBEDDINGS, PFedHN, PFedHNOptions

SHAPES = {"w": torch.Size([4, 3]), "b": torch.Size([4])}


@pytest.mark.parametrize("steps", ["each", "mean"])
def test_one_earlier_gradient_at_most_is_alive_whatever_the_clients_a_round(steps: Literal["each", "mean"], monkeypatch: pytest.MonkeyPatch) -> None:
    server = PFedHN(PFedHNOptions(hidden=4, hidden_layers=1, server_steps=steps), 12, SHAPES, seed=0)
    alive: list[weakref.ref[torch.Tensor]] = []
    most = 0
    real = pfedhn.chain_rule_gradient

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal most
        most = max(most, sum(ref() is not None for ref in alive))  # the earlier clients' gradients still held
        g = real(*args, **kwargs)
        alive.append(weakref.ref(g[EMBEDDINGS]))
        return g

    monkeypatch.setattr(pfedhn, "chain_rule_gradient", counted)
    gen = torch.Generator().manual_seed(1)
    results = [ClientResult(c, {k: torch.randn(s, generator=gen) for k, s in SHAPES.items()}, 5, 1, 0.1, 1.0, 0.0) for c in range(8)]
    server.aggregate({k: torch.zeros(s) for k, s in SHAPES.items()}, results, 0)
    assert len(alive) == 8
    assert most <= 1  # the one before, still bound while the next is made (or the running sum's first term)

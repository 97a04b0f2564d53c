"""dp-fedavg / local take no frozen entry from a client: a model-poisoning upload that moves a frozen weight moves
nothing (before, the frozen entries reached the base as sent, unclipped, so one attacker walked the backbone away)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.privacy.aggregate import PrivateAggregation
from test_umfix_frozen import frozen_model, uploads

FROZEN = frozenset({"0.weight", "0.bias"})


@pytest.mark.parametrize("client_noise", [False, True], ids=["dp-fedavg", "local"])
def test_a_forged_frozen_entry_reaches_the_base_as_the_servers_own(client_noise: bool) -> None:
    start = {k: v.detach().clone() for k, v in frozen_model().state_dict().items()}
    results = uploads(start)
    forged = {**results[0].params, "0.weight": results[0].params["0.weight"] + 100.0, "0.bias": results[0].params["0.bias"] - 100.0}
    results[0] = ClientResult(0, forged, 10, 1, 0.1, 1.0, 0.0)
    agg = PrivateAggregation(FedAvg(), client_noise=client_noise, clip_norm=0.5, noise_multiplier=1.0, expected=3, seed=5, frozen=FROZEN)
    out = agg.aggregate(start, results, 0)
    assert torch.equal(out["0.weight"], start["0.weight"]) and torch.equal(out["0.bias"], start["0.bias"])


def test_an_exempt_client_moves_no_frozen_entry_either() -> None:
    # attack.local_dp = "skip": its trainable update passes unprivatised, but the server takes no frozen entry from anyone
    start = {k: v.detach().clone() for k, v in frozen_model().state_dict().items()}
    results = uploads(start)
    results[1] = ClientResult(1, {**results[1].params, "0.weight": results[1].params["0.weight"] * 50.0}, 10, 1, 0.1, 1.0, 0.0)
    agg = PrivateAggregation(FedAvg(), client_noise=True, clip_norm=0.5, noise_multiplier=1.0, expected=3, seed=5, frozen=FROZEN, exempt=frozenset({1}))
    out = agg.aggregate(start, results, 0)
    assert torch.equal(out["0.weight"], start["0.weight"])


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 5), nn.Tanh())
        self.body[0].weight.requires_grad_(False)
        self.head = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@pytest.mark.parametrize("mechanism", ["dp-fedavg", "local"])
def test_a_gaussian_attacker_leaves_a_frozen_weight_put_in_a_run(mechanism: str) -> None:
    x = torch.randn(60, 4, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).long()
    torch.manual_seed(1)
    model = Net()
    init = model.body[0].weight.detach().clone()
    config = {"federation": {"num_clients": 3, "rounds": 2}, "client": {"lr": 0.1, "batch_size": 4},
              "eval": {"clients": "none", "client_split": "none"}, "seed": 3,
              "privacy": {"mechanism": mechanism, "clip_norm": 0.5, "noise_multiplier": 0.01},
              "attack": {"kind": "gaussian", "clients": [0], "sigma": 10.0}}
    result = chillfl.run(model=model, data=chillfl.TensorData(x, y, x, y, num_classes=2), config=config, write=False, progress=False)
    assert torch.equal(result.state["body.0.weight"], init)  # was moved by about 10
    assert not torch.equal(result.state["head.weight"], model.head.weight.detach())

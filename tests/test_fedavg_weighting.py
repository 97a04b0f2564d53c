"""``weighting = "samples" | "uniform"`` for FedAvg, FedProx and FedBN (FLex&Chill's code averages unweighted)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, client_weights
from chillfl.aggregation.registry import make_aggregator
from chillfl.errors import ConfigError


def _result(cid: int, value: float, n: int) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor([value])}, n, 1, 0.1, 1.0, 0.0)


RESULTS = [_result(0, 1.0, 1), _result(1, 4.0, 3)]
MODEL = nn.Linear(1, 1, bias=False)


def _aggregate(name: str, options: dict) -> float:
    model = nn.Sequential(MODEL, nn.BatchNorm1d(1)) if name == "fedbn" else MODEL  # FedBN refuses a model without batch norm
    agg, _ = make_aggregator(name, options, num_clients=2, model=model, seed=0)
    return float(agg.aggregate({"w": torch.tensor([0.0])}, RESULTS, 1)["w"])


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedbn"])
def test_samples_vs_uniform_by_hand(name):
    # samples: (1 * 1.0 + 3 * 4.0) / (1 + 3) = 13 / 4 = 3.25;  uniform: (1.0 + 4.0) / 2 = 2.5
    assert _aggregate(name, {}) == 3.25
    assert _aggregate(name, {"weighting": "samples"}) == 3.25
    assert _aggregate(name, {"weighting": "uniform"}) == 2.5


def test_client_weights():
    assert client_weights(RESULTS).tolist() == [0.25, 0.75]
    assert client_weights(RESULTS, "uniform").tolist() == [0.5, 0.5]
    three = [_result(i, 0.0, 10 * (i + 1)) for i in range(3)]
    assert torch.allclose(client_weights(three, "uniform"), torch.full((3,), 1 / 3, dtype=torch.float64))


def test_pa3fed_base_takes_the_weighting():
    agg, _ = make_aggregator("pa3fed", {"base": "fedavg", "base_options": {"weighting": "uniform"}}, num_clients=2, model=MODEL, seed=0)
    assert agg.base.default_weights(RESULTS).tolist() == [0.5, 0.5]


def test_bad_weighting_names_the_field():
    with pytest.raises(ConfigError) as err:
        make_aggregator("fedavg", {"weighting": "equal"}, num_clients=2, model=MODEL, seed=0)
    assert err.value.field == "algorithm.weighting" and "uniform" in err.value.message

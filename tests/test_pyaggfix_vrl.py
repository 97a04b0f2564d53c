"""VRL-SGD offers the paper's uniform mean (``weighting = "uniform"``, 1/N) beside its samples-weighted default."""

from __future__ import annotations

from typing import Any

import torch

import chillfl
from chillfl.aggregation.vrl_sgd import VRLSGDOptions

X = torch.randn(20, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
Y = torch.tensor([0, 1] * 10)


def state(algorithm: dict[str, Any], rounds: int = 1) -> dict[str, torch.Tensor]:
    """2 clients of unequal shards (quantity skew), float64."""
    torch.manual_seed(0)
    config = {"algorithm": algorithm, "partition": {"name": "quantity_skew", "h": 0.5, "min_size": 1},
              "federation": {"num_clients": 2, "rounds": rounds}, "client": {"lr": 0.1, "batch_size": 100, "epochs": 2},
              "eval": {"clients": "none", "client_split": "none"}}
    run = chillfl.run(model=torch.nn.Linear(2, 2).double(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config, write=False, progress=False)
    return dict(run.state)


def close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.allclose(a[k], b[k], rtol=0, atol=1e-12) for k in a)


def test_uniform_is_the_papers_mean() -> None:
    """Round 1 (every Delta_i zero) is local SGD then the mean: FedAvg's, under the same weighting; the default stays samples."""
    assert VRLSGDOptions().weighting == "samples"
    uniform = state({"name": "vrl_sgd", "weighting": "uniform"})
    assert close(uniform, state({"name": "fedavg", "weighting": "uniform"}))
    assert close(state({"name": "vrl_sgd"}), state({"name": "fedavg"}))
    assert not close(uniform, state({"name": "fedavg"}))  # unequal shards: the two means differ

"""A ``persistent=False`` buffer in the head: the run's state (model_state) holds none, so head_keys and
representation_keys list none (FedPAC read ``head.temp`` from every upload and crashed with a KeyError mid-run)."""

from __future__ import annotations

import torch
from torch import nn

import chillfl
from chillfl.aggregation.fedper import head_keys
from chillfl.aggregation.lg_fedavg import representation_keys


class HeadNP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 5), nn.Tanh())
        self.body.register_buffer("scale", torch.ones(()), persistent=False)
        self.head = nn.Linear(5, 2)
        self.head.register_buffer("temp", torch.ones(()), persistent=False)
        self.head.register_buffer("kept", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x) * self.body.scale) / self.head.temp + self.head.kept

    def head_name(self) -> str:
        return "head"


def test_head_and_representation_keys_list_no_non_persistent_buffer() -> None:
    model = HeadNP()
    assert head_keys(model) == ["head.weight", "head.bias", "head.kept"]
    assert sorted(representation_keys(model)) == ["body.0.bias", "body.0.weight"]


def test_fedpac_runs_a_head_with_a_non_persistent_buffer() -> None:
    x = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
    y = (x[:, 0] > 0).long()
    torch.manual_seed(1)
    config = {"algorithm": {"name": "fedpac"}, "federation": {"num_clients": 2, "rounds": 2}, "client": {"batch_size": 8},
              "eval": {"clients": "none", "client_split": "none"}}
    result = chillfl.run(model=HeadNP(), data=chillfl.TensorData(x, y, x, y, num_classes=2), config=config, write=False, progress=False)
    assert "head.temp" not in result.state and torch.isfinite(result.state["head.weight"]).all()

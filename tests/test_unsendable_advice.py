"""A model pickle refuses whatever module its class is in (torch's parametrized modules) was refused for the worker
processes with "put your classes in a module", advice that cannot help: only the executors that keep it do."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError


class Normed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.utils.parametrizations.weight_norm(nn.Linear(6, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_a_parametrized_model_is_refused_without_the_module_advice() -> None:
    data = chillfl.TensorData(torch.randn(40, 6), torch.arange(40) % 3, torch.randn(12, 6), torch.arange(12) % 3, num_classes=3)
    config = {"federation": {"num_clients": 2, "rounds": 1}, "executor": "processes"}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=Normed(), data=data, config=config, write=False, progress=False)
    assert err.value.field == "executor"
    assert "put your classes in a module" not in err.value.message and err.value.message.endswith("use executor = 'sequential' or 'vectorized'")

"""A model whose first parameter is float64 and the rest float32: the step-size check and the step's clamp read the
first parameter's dtype alone, so client.lr = 1e39 passed both and raised "value cannot be converted to type float
without overflow" in round 1 (rev103c). Both take the narrowest dtype of the model now."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from chillfl.training.local import within_dtype


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 5).double()
        self.head = nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.first(x.double()).float())


def test_the_check_names_client_lr_for_the_narrowest_dtype() -> None:
    torch.manual_seed(0)
    x = torch.randn(24, 4)
    y = (x[:, 0] > 0).long()
    config = {"federation": {"num_clients": 2, "rounds": 1}, "client": {"lr": 1e39, "batch_size": 4}, "eval": {"clients": "none", "client_split": "none"}}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=Mixed(), data=chillfl.TensorData(x, y, x, y, num_classes=2), config=config, write=False, progress=False)
    assert err.value.field == "client.lr" and "float32" in err.value.message


def test_the_clamp_takes_the_narrowest_dtype() -> None:
    params = {"first": torch.zeros(2, dtype=torch.float64), "head": torch.zeros(2)}
    assert within_dtype(1e39, params) == torch.finfo(torch.float32).max
    assert within_dtype(-1e39, params) == -torch.finfo(torch.float32).max
    assert within_dtype(0.05, params) == 0.05

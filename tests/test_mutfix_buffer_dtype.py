"""check_model_fits' buffer check compares dtypes too (mut101 M15): ``torch.equal`` is True across dtypes, so a forward
that re-casts a ``persistent=False`` buffer with equal values (float32 -> float64) passed without the dtype clause,
and each executor's copy then computed in its own precision."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from test_r100a1_buffer_check import X, Y


class Recast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 5)
        self.head = nn.Linear(5, 2)
        self.register_buffer("table", torch.ones(5), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.table = self.table.double()  # same values, another dtype
        return self.head(torch.tanh(self.body(x)) * self.table.float())


def test_a_forward_that_recasts_a_non_persistent_buffer_is_refused_on_model() -> None:
    assert torch.equal(torch.ones(5), torch.ones(5, dtype=torch.float64))  # why the dtype must be compared on its own
    config = {"federation": {"num_clients": 2, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"}}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=Recast(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config, write=False, progress=False)
    assert err.value.field == "model" and "'table'" in err.value.message

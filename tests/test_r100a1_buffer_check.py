"""check_model_fits refuses a model whose training forward changes a ``persistent=False`` buffer: the run's state holds
none, so such a buffer (a counter, a running statistic) lived on each executor's own copy, was not checkpointed, and
the executors disagreed and resume was not bitwise. Constants, caches filled once, BatchNorm and the zoo pass."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from chillfl.experiment import check_model_fits
from chillfl.models import MODELS, build_model
from test_model_head import SHAPES

X = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 5)
        self.head = nn.Linear(5, 2)
        self.register_buffer("calls", torch.zeros(()), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls.add_(1)
        return self.head(torch.tanh(self.body(x))) * (1 + 0.01 * self.calls)


class Cached(nn.Module):
    """A constant (a rotary inv_freq) and a cache the first forward fills: neither changes once the module has run."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5))
        self.head = nn.Linear(5, 2)
        self.register_buffer("scale", torch.full((5,), 0.5), persistent=False)
        self.register_buffer("cache", torch.empty(0), persistent=False)
        self.register_buffer("gap", torch.tensor(float("nan")), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.cache.numel() == 0:
            self.cache = torch.ones(5)
        return self.head(self.body(x) * self.scale * self.cache)


def test_a_forward_that_changes_a_non_persistent_buffer_is_refused_before_the_run() -> None:
    config = {"federation": {"num_clients": 2, "rounds": 1}, "eval": {"clients": "none", "client_split": "none"}}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=Counting(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config, write=False, progress=False)
    assert err.value.field == "model" and "'calls'" in err.value.message and "persistent=True" in err.value.message
    assert "\n" not in err.value.message


def test_constants_caches_and_batch_norm_pass() -> None:
    check_model_fits(Cached(), X[:2], 2)
    model = Counting()
    model.calls = torch.zeros(())  # reassigned a plain tensor: still the buffer, now changed by training forwards
    with pytest.raises(ConfigError):
        check_model_fits(model, X[:2], 2)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_bundled_model_passes(name: str) -> None:
    shape = SHAPES.get(name, (3, 32, 32))
    model = build_model(name, shape, 10, {}, seed=0)
    x = torch.randint(0, 10, (2, *shape)).float() if name == "char_lstm" else torch.randn(2, *shape)
    check_model_fits(model, x, 10)

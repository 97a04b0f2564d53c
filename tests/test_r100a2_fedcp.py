"""rev100a #2 (FedCP's part): FedCP's policy head lacked a ``persistent=False`` buffer of the head it replaces, which the
model's forward reads (``AttributeError: 'PolicyHead' object has no attribute 'temp'``)."""

from __future__ import annotations

import pytest
import torch
from test_pyagg_bind import X, Y, model, same
from torch import nn

import chillfl
from chillfl.errors import ConfigError


class HeadBuffer(nn.Module):
    """The harness's model with a ``persistent=False`` temperature on its head, which the forward reads."""

    def __init__(self, temp: float, name: str = "temp") -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 5), nn.Tanh())
        self.head = nn.Linear(5, 2)
        self.name = name
        self.head.register_buffer(name, torch.tensor(temp, dtype=torch.float64), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x)) / getattr(self.head, self.name)

    def head_name(self) -> str:
        return "head"


def _fedcp_on(net: nn.Module) -> dict[str, torch.Tensor]:
    run = chillfl.run(model=net.double(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config={
        "algorithm": {"name": "fedcp"}, "federation": {"num_clients": 3, "rounds": 2}, "client": {"lr": 0.1, "batch_size": 4, "epochs": 1},
        "eval": {"clients": "none", "client_split": "none"}, "seed": 3}, write=False, progress=False)
    return {k: v.detach().clone() for k, v in run.state.items()}


def test_fedcp_policy_head_keeps_the_heads_non_persistent_buffers() -> None:
    """#2: FedCP on a head with a ``persistent=False`` buffer failed (``'PolicyHead' object has no attribute 'temp'``):
    the policy head carries a copy, whose value the forward reads (temp 1 runs as the plain model, temp 2 otherwise)."""
    torch.manual_seed(1)
    one = _fedcp_on(HeadBuffer(1.0))
    torch.manual_seed(1)
    two = _fedcp_on(HeadBuffer(2.0))
    plain = _fedcp_on(model())
    assert same(one, plain) and not same(two, plain)


def test_fedcp_refuses_a_head_buffer_named_as_its_own() -> None:
    """A head's ``persistent=False`` buffer named as one of the policy head's own (``seed``) cannot be carried: one line."""
    torch.manual_seed(1)
    with pytest.raises(ConfigError) as err:
        _fedcp_on(HeadBuffer(1.0, "seed"))
    assert err.value.field == "model" and "'seed'" in err.value.message

"""umfix's frozen-parameter and per-sample-probe fixes as a run reaches them (the mechanisms' builders pass the model's
frozen names; dp-sgd's step is probed before the run), not only their classes called directly."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError

X = torch.randn(60, 8, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()
DATA = chillfl.TensorData(X, Y, X, Y, num_classes=2)


class Frozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 6), nn.ReLU())
        self.body.requires_grad_(False)
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


@pytest.mark.parametrize("mechanism", ["dp-fedavg", "local"])
def test_a_frozen_backbone_stays_put_under_noised_uploads(mechanism: str) -> None:
    torch.manual_seed(0)
    model = Frozen()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    config = {"federation": {"num_clients": 3, "rounds": 2}, "privacy": {"mechanism": mechanism, "noise_multiplier": 0.5}}
    result = chillfl.run(model=model, data=DATA, config=config, write=False, progress=False)
    assert all(torch.equal(result.state[k], start[k]) for k in start if k.startswith("body"))
    assert not torch.equal(result.state["head.weight"], start["head.weight"])


class GRUNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(2, 4, batch_first=True)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x.view(x.shape[0], 4, 2))
        return self.head(out[:, -1])


def test_dp_sgd_refuses_a_gru_before_the_run() -> None:
    config = {"federation": {"num_clients": 3, "rounds": 1}, "privacy": {"mechanism": "dp-sgd", "noise_multiplier": 1.0}}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=GRUNet(), data=DATA, config=config, write=False, progress=False)
    assert err.value.field == "privacy.mechanism" and "GRU" in err.value.message

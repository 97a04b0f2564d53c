"""Where a method reads or splits at the classifier head: a head tied to a body weight, and a guessed head that is not one."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")


class TiedLM(nn.Module):
    """A char-LM's weight tying: the output layer reuses the embedding (vocabulary == classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(4, 8)
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.body(self.emb(x[:, 0].long().clamp(0, 3)))))

    def head_name(self) -> str:
        return "head"


def tokens() -> chillfl.TensorData:
    x = (torch.arange(48) % 4).float().unsqueeze(1)
    y = (torch.arange(48) + 1) % 4
    return chillfl.TensorData(x, y, x[:8], y[:8])


def refusal(model: nn.Module, data: chillfl.TensorData, **config: Any) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=model, data=data, write=False, progress=False, config={"federation": {"num_clients": 2, "rounds": 1}, **config})
    return err.value


@pytest.mark.parametrize("algorithm", ["fedper", "fedrep", "fedbabu", "fedrod"])
def test_a_head_tied_to_a_body_weight_is_refused_on_model(algorithm: str) -> None:
    # FedBABU trained its "frozen" head, FedPer/FedRep averaged the "personal" head's weight, FedRoD failed mid-run
    err = refusal(TiedLM(), tokens(), algorithm={"name": algorithm})
    assert err.field == "model"
    assert "'head.weight'" in err.message and "'emb.weight'" in err.message


def test_a_tied_head_runs_where_nothing_splits_at_it() -> None:
    result = chillfl.run(model=TiedLM(), data=tokens(), write=False, progress=False, config={"federation": {"num_clients": 2, "rounds": 1}})
    assert result.model.head.weight is result.model.emb.weight

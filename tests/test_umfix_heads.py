"""Where a method reads or splits at the classifier head: a head tied to a body weight, and a guessed head that is not one."""

from __future__ import annotations

from pathlib import Path
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


class PoolHead(nn.Module):
    """No nn.Linear makes the logits: the last one has 8 rows, pooled down to the 4 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2, self.pool = nn.Linear(6, 16), nn.Linear(16, 8), nn.AdaptiveAvgPool1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.l2(torch.relu(self.l1(x))).unsqueeze(1)).squeeze(1)


def features() -> chillfl.TensorData:
    x = torch.randn(48, 6, generator=torch.Generator().manual_seed(0))
    y = torch.arange(48) % 4
    return chillfl.TensorData(x, y, x[:8], y[:8])


@pytest.mark.parametrize("config", [{"algorithm": {"name": "fedrod"}}, {"algorithm": {"name": "fedper"}}, {"algorithm": {"name": "moon"}}],
                         ids=["fedrod", "fedper", "moon"])
def test_a_guessed_head_with_other_rows_than_classes_is_refused_on_model(config: dict[str, Any]) -> None:
    # FedRoD crashed mid-run on its [batch, 8] + [4] prior; FedPer and MOON split at 'l2' with only the generic warning
    err = refusal(PoolHead(), features(), **config)
    assert err.field == "model"
    assert "'l2'" in err.message and "8 outputs" in err.message and "4 classes" in err.message and "head_name()" in err.message


def test_a_guessed_head_is_not_checked_where_no_method_reads_it() -> None:
    result = chillfl.run(model=PoolHead(), data=features(), write=False, progress=False, config={"federation": {"num_clients": 2, "rounds": 1}})
    assert set(result.state) == set(PoolHead().state_dict())


def test_a_tied_models_state_loads_with_strict_false_as_documented(tmp_path: Path) -> None:
    # docs/python-api.md: the tied tensor is saved once, under its first name; strict=False fills the alias through the tie
    import safetensors.torch

    result = chillfl.run(model=TiedLM(), data=tokens(), out_dir=tmp_path, progress=False, config={"federation": {"num_clients": 2, "rounds": 1}})
    assert "emb.weight" in result.state and "head.weight" not in result.state
    assert result.folder is not None
    for state in (result.state, safetensors.torch.load_file(result.folder / "model.safetensors")):
        fresh = TiedLM()
        missing, unexpected = fresh.load_state_dict(state, strict=False)
        assert missing == ["head.weight"] and not unexpected
        assert torch.equal(fresh.head.weight, result.state["emb.weight"])

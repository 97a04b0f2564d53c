"""A weight tied under two names (a char-LM's output layer reusing its embedding; two Linear layers sharing one weight)
trains as torch's SGD does under the executors that factor their Linear layers' gradients: the second use's factors were
recorded under a name the state does not hold and dropped (the tied weight trained by its first use alone)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import chillfl


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(4, 16)
        self.mid = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mid(self.emb(x).mean(1))))

    def head_name(self) -> str:
        return "head"


class TiedLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6)
        self.b = nn.Linear(6, 6)
        self.b.weight = self.a.weight
        self.head = nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.b(torch.tanh(self.a(x.float())))))

    def head_name(self) -> str:
        return "head"


def _data(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 4, (120, 5), generator=g) if isinstance(model, TiedLM) else torch.randn(120, 6, generator=g)
    return x, (x[:, -1] if isinstance(model, TiedLM) else (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long())


@pytest.mark.parametrize("make", [TiedLM, TiedLinears])
def test_one_full_batch_step_is_torch_sgds(make: type[nn.Module]) -> None:
    torch.manual_seed(0)
    start = make()
    x, y = _data(start)
    reference = make()
    reference.load_state_dict(start.state_dict())
    F.cross_entropy(reference(x), y).backward()
    with torch.no_grad():
        expected = {k: p - 0.5 * p.grad for k, p in reference.named_parameters()}  # type: ignore[operator]
    config = {"federation": {"num_clients": 1, "rounds": 1}, "client": {"lr": 0.5, "batch_size": 120}, "executor": "sequential",
              "eval": {"clients": "none", "client_split": "none"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = chillfl.run(model=start, data=chillfl.TensorData(x, y, x, y, num_classes=4), config=config, write=False, progress=False)
    step = max(float((expected[k] - p.detach()).abs().max()) for k, p in start.named_parameters())
    for key, value in result.state.items():
        assert torch.allclose(value, expected[key], atol=1e-5 * max(step, 1.0)), key

"""APFL's mixed loss and FedCP's policy raise only half-precision logits to float32: a float64 model's stayed
float64 everywhere else, but these two ``.float()`` calls rounded its loss (APFL) and its policy (FedCP) to float32."""

from __future__ import annotations

import torch
from torch import nn

from chillfl.aggregation.apfl import MixedLoss
from chillfl.aggregation.fedcp import policy
from chillfl.training.terms import StepView


def _logits(dtype: torch.dtype) -> torch.Tensor:
    return torch.linspace(-3.0, 3.0, 24, dtype=torch.float64).reshape(3, 8).sin().mul(1.0 + 1e-12).to(dtype)


def test_fedcp_policy_of_float64_logits_is_float64_maths() -> None:
    logits = _logits(torch.float64)
    noise = torch.full((3, 4), 0.3)
    want = torch.sigmoid((logits[:, :4] - logits[:, 4:] + torch.log(noise) - torch.log1p(-noise)) / 0.7)
    assert torch.equal(policy(logits, 0.7, noise), want)  # was rounded through float32


def test_fedcp_policy_of_bf16_logits_is_as_before() -> None:
    logits = _logits(torch.bfloat16)
    want = torch.sigmoid((logits[:, :4] - logits[:, 4:]).float() / 0.7).to(torch.bfloat16)
    assert torch.equal(policy(logits, 0.7), want)


def _loss_dtype(dtype: torch.dtype) -> torch.dtype:
    seen: list[torch.dtype] = []

    def base(logits: torch.Tensor, y: torch.Tensor, temperature: float) -> torch.Tensor:
        seen.append(logits.dtype)
        return logits.sum()

    torch.manual_seed(0)
    pair = nn.ModuleDict({"v": nn.Linear(4, 3), "w": nn.Linear(4, 3)}).to(dtype)
    params = {**{k: p.detach() for k, p in pair.named_parameters()}, "alpha": torch.tensor(0.5, dtype=dtype)}
    x = torch.randn(5, 4, dtype=dtype)
    step = StepView(model=pair, x=x, y=torch.zeros(5, dtype=torch.long), features=x, logits=x, base_loss=x.sum(), buffers={})
    MixedLoss(base)(params, {}, step)  # type: ignore[arg-type]
    return seen[0]


def test_apfl_mixed_loss_keeps_float64_logits_and_raises_half_ones() -> None:
    assert _loss_dtype(torch.float64) == torch.float64  # was float32
    assert _loss_dtype(torch.bfloat16) == torch.float32
    assert _loss_dtype(torch.float32) == torch.float32

"""A 16-bit model's temperature losses are taken in float32 and cast back (report-numeric #4).

Hand values at T = 1e-4, in a batch of two rows:
  row 1: z = (8, 7, 0), y = 0: CE(z/T) = log(1 + e^-1e4 + e^-8e4) = 0 (to every float's precision);
         in float16, z/T = 8e4 > 65504 is inf and the old loss was nan.
  row 2: z = (1, 0.5, 0), y = 1: CE(z/T) = 0.5e4 + log(1 + e^-5e3 + ...) = 5000.
Mean: 2500, exact in float16 (bfloat16 rounds it). The logit gradient (softmax(z/T) - e_y) / (T B) has entries 0 and +-5000.
"""

from __future__ import annotations

import pytest
import torch

from chillfl.protocols.softlabels.labels import soft_target_kl
from chillfl.training.objective import temperature_cross_entropy

Z = [[8.0, 7.0, 0.0], [1.0, 0.5, 0.0]]
Y = torch.tensor([0, 1])
GRAD = [[0.0, 0.0, 0.0], [5000.0, -5000.0, 0.0]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("which", ["ce", "kl"])
def test_16_bit_loss_at_a_small_temperature_is_finite_and_in_the_logits_dtype(which: str, dtype: torch.dtype) -> None:
    z = torch.tensor(Z, dtype=dtype, requires_grad=True)
    if which == "ce":
        loss = temperature_cross_entropy(z, Y, 1e-4)
    else:
        loss = soft_target_kl(z, torch.eye(3, dtype=dtype)[Y], 1e-4)
    (g,) = torch.autograd.grad(loss, z)
    assert loss.dtype == dtype and g.dtype == dtype
    assert torch.equal(loss, torch.tensor(2500.0, dtype=dtype))  # bfloat16 rounds it to 2496
    torch.testing.assert_close(g, torch.tensor(GRAD, dtype=dtype), rtol=0.0, atol=0.0)


def test_soft_target_kl_keeps_the_promoted_dtype_of_half_logits_and_float_targets() -> None:
    loss = soft_target_kl(torch.tensor(Z, dtype=torch.float16), torch.eye(3)[Y], 1e-4)
    assert loss.dtype == torch.float32 and float(loss) == 2500.0


def test_float32_and_float64_are_unchanged() -> None:
    for dtype in (torch.float32, torch.float64):
        z = torch.tensor(Z, dtype=dtype)
        expected = -torch.log_softmax(z / 1e-4, dim=-1).gather(-1, Y.unsqueeze(-1)).mean()
        assert torch.equal(temperature_cross_entropy(z, Y, 1e-4), expected)

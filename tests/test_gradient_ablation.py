"""FedChill Table 5 gradient ablation: logit gradients against the analytic formulas.

Hand computation (T = 0.5), two samples:
  row 1: z = (0, ln 2, ln 3), y = 0
    softmax(z)   = (1, 2, 3)/6           g_1 = softmax(z) - e_y = (-5/6, 1/3, 1/2)
    softmax(z/T) = (1, 4, 9)/14          g_T = (softmax(z/T) - e_y)/T = (-13/7, 4/7, 9/7)
    ||g_1|| = sqrt(38)/6, ||g_T|| = sqrt(266)/7 = sqrt(7) sqrt(38)/7
  row 2: z = (0, 0, 0), y = 1
    softmax = 1/3 at any T               g_1 = (1/3, -2/3, 1/3), g_T = g_1 / T = (2/3, -4/3, 2/3)
Batch mean: each row's gradient is divided by B = 2.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import grad, vmap

from chillfl.training.gradient_ablation import (
    BASE_LOSSES,
    direction_only,
    direction_only_norm,
    magnitude_only,
    magnitude_only_norm,
)
from chillfl.training.objective import temperature_cross_entropy

T = 0.5
S7 = math.sqrt(7.0)
LOGITS = torch.tensor([[0.0, math.log(2.0), math.log(3.0)], [0.0, 0.0, 0.0]], dtype=torch.float64)
TARGETS = torch.tensor([0, 1])


def _logit_grad(loss_fn, temperature: float = T) -> tuple[torch.Tensor, torch.Tensor]:
    z = LOGITS.clone().requires_grad_(True)
    value = loss_fn(z, TARGETS, temperature)
    value.backward()
    return value.detach(), z.grad


def _expect(row1: list[float], row2: list[float]) -> torch.Tensor:
    return torch.tensor([row1, row2], dtype=torch.float64) / 2


def test_magnitude_only_is_standard_softmax_gradient_over_t() -> None:
    value, g = _logit_grad(magnitude_only)
    # g_1 / T: row 1 (-5/3, 2/3, 1), row 2 (2/3, -4/3, 2/3)
    torch.testing.assert_close(g, _expect([-5 / 3, 2 / 3, 1.0], [2 / 3, -4 / 3, 2 / 3]))
    # value is the T = 1 cross-entropy: (ln 6 + ln 3) / 2
    assert value.item() == pytest.approx((math.log(6) + math.log(3)) / 2)


def test_direction_only_is_temperature_gradient_times_t() -> None:
    value, g = _logit_grad(direction_only)
    # T * g_T = softmax(z/T) - e_y: row 1 (-13/14, 4/14, 9/14), row 2 (1/3, -2/3, 1/3)
    torch.testing.assert_close(g, _expect([-13 / 14, 4 / 14, 9 / 14], [1 / 3, -2 / 3, 1 / 3]))
    # value is the temperature cross-entropy: (ln 14 + ln 3) / 2
    assert value.item() == pytest.approx((math.log(14) + math.log(3)) / 2)


def test_norm_matched_alternatives() -> None:
    # magnitude_only_norm, row 1: g_1 * ||g_T|| / ||g_1|| = g_1 * 6/sqrt(7) = (-5, 2, 3)/sqrt(7);
    # row 2: same direction, so g_1 * (1/T) = (2/3, -4/3, 2/3)
    _, g = _logit_grad(magnitude_only_norm)
    torch.testing.assert_close(g, _expect([-5 / S7, 2 / S7, 3 / S7], [2 / 3, -4 / 3, 2 / 3]))
    # direction_only_norm, row 1: g_T * ||g_1|| / ||g_T|| = (-13, 4, 9)/7 * 7/(6 sqrt 7) = (-13, 4, 9)/(6 sqrt 7)
    # row 2: g_T * T = g_1 = (1/3, -2/3, 1/3)
    _, g = _logit_grad(direction_only_norm)
    torch.testing.assert_close(g, _expect([-13 / (6 * S7), 4 / (6 * S7), 9 / (6 * S7)], [1 / 3, -2 / 3, 1 / 3]))


def test_all_variants_equal_standard_at_t_one() -> None:
    _, reference = _logit_grad(temperature_cross_entropy, 1.0)
    for name, fn in BASE_LOSSES.items():
        _, g = _logit_grad(fn, 1.0)
        torch.testing.assert_close(g, reference, msg=name)


def test_registry() -> None:
    assert BASE_LOSSES["standard"] is temperature_cross_entropy
    assert BASE_LOSSES["magnitude_only"] is magnitude_only
    assert BASE_LOSSES["direction_only"] is direction_only


def test_vmappable_with_per_client_temperature_tensor() -> None:
    # two clients, same batch, T = 0.5 and 1.0: client 0 must match the hand values above
    temps = torch.tensor([0.5, 1.0], dtype=torch.float64)
    logits = LOGITS.expand(2, -1, -1)
    targets = TARGETS.expand(2, -1)
    for fn, expected in (
        (magnitude_only, _expect([-5 / 3, 2 / 3, 1.0], [2 / 3, -4 / 3, 2 / 3])),
        (direction_only, _expect([-13 / 14, 4 / 14, 9 / 14], [1 / 3, -2 / 3, 1 / 3])),
        (direction_only_norm, _expect([-13 / (6 * S7), 4 / (6 * S7), 9 / (6 * S7)], [1 / 3, -2 / 3, 1 / 3])),
    ):
        g = vmap(grad(fn))(logits, targets, temps)
        torch.testing.assert_close(g[0], expected)
        # T = 1: the standard gradient softmax(z) - e_y, halved: row 1 (-5/6, 1/3, 1/2), row 2 (1/3, -2/3, 1/3)
        torch.testing.assert_close(g[1], _expect([-5 / 6, 1 / 3, 1 / 2], [1 / 3, -2 / 3, 1 / 3]))


def test_saturated_softmax_gives_finite_gradients() -> None:
    # z/T = (0, 1e4): softmax(z/T) is exactly one-hot on the target, so g_T = 0 and the norm ratios
    # must not divide by zero
    z = torch.tensor([[0.0, 100.0]], requires_grad=True)
    for fn in (magnitude_only_norm, direction_only_norm):
        value = fn(z, torch.tensor([1]), 0.01)
        (g,) = torch.autograd.grad(value, z)
        assert torch.isfinite(value) and torch.all(torch.isfinite(g))
        torch.testing.assert_close(g, torch.zeros_like(g))

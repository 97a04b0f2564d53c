"""The ``*_norm`` ablation losses keep a confident sample's direction (report-numeric #3).

Hand values in 400-digit decimal arithmetic, independent of torch: for z = (m, 0, -0.5), y = 0 the per-sample logit
gradient of ``direction_only_norm`` is ||g_1|| * unit(softmax(z/T) - e_y); of ``magnitude_only_norm`` it is
||g_T|| * unit(softmax(z) - e_y), g_T = (softmax(z/T) - e_y) / T. Dividing by ``||g_T||.clamp_min(1e-12)`` gave
9.4e-6 instead of 0.11 (T = 0.05, m = 2) and 0 instead of 0.23 (T = 0.01, m = 1).
"""

from __future__ import annotations

from decimal import Decimal, getcontext

import pytest
import torch
from torch.func import grad, vmap

from chillfl.training.gradient_ablation import direction_only_norm, magnitude_only_norm

getcontext().prec = 400  # e^(-250) against 1: the softmax at T = 0.01 needs more than 200 digits


def _g(z: list[Decimal], y: int, t: Decimal) -> list[Decimal]:
    """(softmax(z/T) - e_y) / T in decimal."""
    e = [(v / t).exp() for v in z]
    total = sum(e)
    return [(p / total - (1 if j == y else 0)) / t for j, p in enumerate(e)]


def _norm(v: list[Decimal]) -> Decimal:
    return sum(x * x for x in v).sqrt()


def _hand(margin: str, t: str, direction: bool) -> list[float]:
    z = [Decimal(margin), Decimal(0), Decimal("-0.5")]
    g1, g_t = _g(z, 0, Decimal(1)), _g(z, 0, Decimal(t))
    along, size = (g_t, _norm(g1)) if direction else (g1, _norm(g_t))
    return [float(x / _norm(along) * size) for x in along]


# (T, margin, the direction_only_norm gradient norm of the report's table, measured in a batch of 2)
CASES = [("0.05", "1.5", 1.632e-01), ("0.05", "2", 1.105e-01), ("0.05", "3", 4.580e-02), ("0.01", "1", 2.297e-01)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("t, margin, table", CASES)
def test_direction_only_norm_matches_hand_values(t: str, margin: str, table: float, dtype: torch.dtype) -> None:
    z = torch.tensor([[float(margin), 0.0, -0.5]], dtype=dtype, requires_grad=True)
    (g,) = torch.autograd.grad(direction_only_norm(z, torch.tensor([0]), float(t)), z)
    expected = torch.tensor([_hand(margin, t, direction=True)], dtype=dtype)
    torch.testing.assert_close(g, expected, rtol=1e-5, atol=0.0)
    assert float(g.norm()) / 2 == pytest.approx(table, rel=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_magnitude_only_norm_keeps_a_confident_sample_at_a_heating_temperature(dtype: torch.dtype) -> None:
    # T = 10, margin 40: ||softmax(z) - e_y|| ~ 5e-18 (the old clamp made the gradient ~1e-5 of its size)
    z = torch.tensor([[40.0, 0.0, -0.5]], dtype=dtype, requires_grad=True)
    (g,) = torch.autograd.grad(magnitude_only_norm(z, torch.tensor([0]), 10.0), z)
    torch.testing.assert_close(g, torch.tensor([_hand("40", "10", direction=False)], dtype=dtype), rtol=1e-5, atol=0.0)


def test_direction_only_norm_vmaps_with_a_per_client_temperature() -> None:
    z = torch.tensor([[2.0, 0.0, -0.5]], dtype=torch.float64).expand(2, -1, -1)
    temps = torch.tensor([0.05, 0.01], dtype=torch.float64)
    g = vmap(grad(direction_only_norm))(z, torch.tensor([[0], [0]]), temps)
    for row, t in zip(g, ("0.05", "0.01")):
        torch.testing.assert_close(row, torch.tensor([_hand("2", t, direction=True)], dtype=torch.float64), rtol=1e-9, atol=0.0)

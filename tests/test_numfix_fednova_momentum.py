"""FedNova's a_i as momentum approaches 1 (report-numeric #7).

a_i = sum_{k=1}^{tau} sum_{j<k} rho^j; as rho -> 1 it tends to tau(tau + 1)/2 (276 for tau = 23). The closed form
(tau - rho(1 - rho^tau)/(1 - rho)) / (1 - rho) cancels: at rho = 1 - 1e-10 it gave 23 (relative error 0.92).
Hand values: the same sum in exact rational arithmetic.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.fednova import FedNova, FedNovaOptions, effective_steps


def _exact(steps: int, rho: float) -> float:
    r, a, buffer = Fraction(rho), Fraction(0), Fraction(0)
    for _ in range(steps):
        buffer = r * buffer + 1
        a += buffer
    return float(a)


@pytest.mark.parametrize("rho", [1 - 1e-6, 0.99999999, 1 - 1e-10, 0.9999])
@pytest.mark.parametrize("steps", [2, 5, 23, 50])
def test_effective_steps_near_momentum_one_is_exact(steps: int, rho: float) -> None:
    assert effective_steps(steps, rho) == pytest.approx(_exact(steps, rho), rel=1e-14)


def test_effective_steps_at_rho_one_minus_1e_10_by_hand() -> None:
    # sum_{k=1}^{23} k = 276, less O(1e-10 * 23^3)
    assert effective_steps(23, 1 - 1e-10) == pytest.approx(276.0, rel=1e-6)


@pytest.mark.parametrize("rho", [0.5, 0.9, 0.99])
def test_ordinary_momentum_keeps_the_closed_form(rho: float) -> None:
    for steps in (1, 3, 23):
        assert effective_steps(steps, rho) == (steps - rho * (1 - rho**steps) / (1 - rho)) / (1 - rho)


def test_recorded_tau_eff_near_momentum_one() -> None:
    rho = 1 - 1e-10
    res = [ClientResult(0, {"w": torch.tensor([-1.0])}, num_samples=10, num_steps=23, lr=1e-6, temperature=1.0, train_loss=0.0)]
    agg = FedNova(FedNovaOptions(momentum=rho))
    agg.aggregate({"w": torch.tensor([0.0])}, res, 0)
    assert agg.round_metrics()["tau_eff"] == pytest.approx(_exact(23, rho), rel=1e-14)

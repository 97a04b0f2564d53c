"""Epsilon from a well-kept accountant: Opacus's RDP accountant (or its PRV one), never our own maths.

Why Opacus's RDP accountant: it is maintained with PyTorch's own DP library, its subsampled-Gaussian
RDP bound (Mironov et al. 2019) is tight enough for the few hundred compositions of an FL run, it
composes heterogeneous steps exactly (a history of (sigma, q, steps)), and it is pure Python on
numpy/scipy: no extra native dependency next to torch. ``accountant = "prv"`` uses Opacus's PRV
accountant (Gopi et al. 2021), tighter at large step counts, same interface. The one formula written
here, :func:`rdp_floor`, only says which targets the RDP conversion cannot reach, to refuse them before
Opacus's search.

A run keeps one :class:`Ledger`: per privacy unit (the whole population for ``dp-fedavg``, each client
for ``dp-sgd`` and ``local``, each client's soft-label rows), the accountant's history. The reported
epsilon is the largest over the units (the worst-off client). The ledger is part of the checkpoint.

Checked against: pytorch/opacus 1.6 ``opacus/accountants/rdp.py`` (``DEFAULT_ALPHAS``: 1.1 .. 10.9 by 0.1 and
12 .. 63; the history), ``opacus/accountants/analysis/rdp.py`` (``compute_rdp``, Mironov, Talwar & Zhang 2019 Sec. 3.3;
``get_privacy_spent``, Balle et al. 2020 Thm 21, not Mironov 2017 Prop. 3's looser conversion),
``opacus/accountants/utils.py`` (``get_noise_multiplier``: sigma doubled to 1e6 before its bisection, hence
:func:`rdp_floor`), ``opacus/accountants/prv.py`` (``eps_upper``), ``opacus/tests/accountants_test.py`` and
tensorflow/privacy ``compute_dp_sgd_privacy_test.py`` (their published epsilons, reproduced in
tests/test_privacy_math.py), google/differential-privacy ``dp_accounting/rdp/rdp_privacy_accountant.py`` (its
longer default orders, up to 1024: docs/privacy.md, "Orders"), 2026-12-02.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping

import torch

from chillfl.extras import need

History = tuple[tuple[float, float, int], ...]
"""(noise multiplier, sample rate, steps) entries, as Opacus's accountants keep them."""


def _accountant(kind: str) -> Any:
    accountants = need("opacus.accountants", "privacy", "[privacy]")
    return accountants.RDPAccountant() if kind == "rdp" else accountants.PRVAccountant()


def epsilon_of(history: History, delta: float, kind: str = "rdp") -> float:
    """(epsilon at ``delta``) of a history of subsampled Gaussian steps, by Opacus's accountant; 0 before any step."""
    if not history:
        return 0.0
    acc = _accountant(kind)
    acc.history = [(float(s), float(q), int(n)) for s, q, n in history]
    with warnings.catch_warnings():  # "optimal order is the smallest/largest alpha": the bound is valid, only looser
        warnings.filterwarnings("ignore", message="Optimal order")
        warnings.filterwarnings("ignore", category=RuntimeWarning)  # PRV at q = 1 takes log(1 - q) = -inf on its way: harmless
        return float(acc.get_epsilon(delta=delta))


def rdp_floor(delta: float) -> float:
    """The smallest epsilon the RDP accountant can report at ``delta``, whatever sigma: its (epsilon, delta) conversion
    (Balle et al. 2020, Thm 21) at zero RDP, log((a - 1) / a) - (log delta + log a) / (a - 1), minimised over Opacus's
    orders a (at most 63: 0.0286 at delta = 1e-3, 0.103 at 1e-5). A target at or below it is reached by no sigma."""
    orders = need("opacus.accountants", "privacy", "[privacy]").RDPAccountant.DEFAULT_ALPHAS
    return min(math.log((a - 1) / a) - (math.log(delta) + math.log(a)) / (a - 1) for a in orders)


def noise_for(target_epsilon: float, delta: float, sample_rate: float, steps: int, kind: str = "rdp") -> float:
    """The noise multiplier that spends ``target_epsilon`` over ``steps`` steps at ``sample_rate`` (Opacus's search).

    A target no sigma reaches under the RDP accountant (at or below :func:`rdp_floor`) is a ValueError at once: Opacus's
    search would double sigma up to 1e6 first, and at a large sample rate its fractional-order series takes seconds a
    sigma there (minutes in all) before saying so."""
    if kind == "rdp" and target_epsilon <= (floor := rdp_floor(delta)):
        raise ValueError(f"The privacy budget is too low: the RDP accountant reports epsilon > {floor:.4g} at delta = {delta} whatever the noise")
    utils = need("opacus.accountants.utils", "privacy", "[privacy]")
    with warnings.catch_warnings():  # see epsilon_of
        warnings.filterwarnings("ignore", message="Optimal order")
        return float(utils.get_noise_multiplier(target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate, steps=steps, accountant=kind))


def add_steps(history: History, sigma: float, rate: float, steps: int) -> History:
    """``history`` after ``steps`` more steps at (sigma, rate): merged into the last entry when it has the same pair."""
    if steps <= 0:
        return history
    if history and history[-1][0] == sigma and history[-1][1] == rate:
        return (*history[:-1], (sigma, rate, history[-1][2] + steps))
    return (*history, (sigma, rate, steps))


class Ledger:
    """Every privacy unit's accountant history; epsilon = the worst unit's, memoised per distinct history."""

    def __init__(self, delta: float, kind: str = "rdp") -> None:
        self.delta = delta
        self.kind = kind
        self.histories: dict[str, History] = {}
        self._cache: dict[History, float] = {}

    def spend(self, unit: str, sigma: float, rate: float, steps: int = 1) -> None:
        self.histories[unit] = add_steps(self.histories.get(unit, ()), sigma, rate, steps)

    def epsilon(self, unit: str | None = None) -> float:
        """One unit's epsilon, or (``None``) the largest over all units."""
        units = [unit] if unit is not None else list(self.histories)
        return max((self._epsilon(self.histories.get(u, ())) for u in units), default=0.0)

    def _epsilon(self, history: History) -> float:
        if history not in self._cache:
            self._cache[history] = epsilon_of(history, self.delta, self.kind)
        return self._cache[history]

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Each unit's history as a float64 [entries, 3] tensor (checkpoints hold tensors)."""
        return {unit: torch.tensor(h, dtype=torch.float64).reshape(-1, 3) for unit, h in self.histories.items()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.histories = {unit: tuple((float(s), float(q), int(n)) for s, q, n in t.tolist()) for unit, t in state.items()}


def finite(epsilon: float) -> float | None:
    """An epsilon as JSON can hold it (None for infinity)."""
    return epsilon if math.isfinite(epsilon) else None

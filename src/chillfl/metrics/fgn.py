"""Federated Gradient Norm (FGN) and critical-learning-period (CLP) detection (PA3Fed, Eqs. 4-6).

Checked against papers/pa3fed.txt Eq. 4-6 and Algorithm 1 lines 9-14, 2026-12-02; no authors' code found.

A gradient step of size eta changes a loss by about (first-order Taylor, Eq. 4)

    Delta L(w; x, y) = eta * ||g(x, y)||^2

and the federated gradient norm of round t weighs the clients' changes by
their data shares (Eq. 5)

    FGN(t) = sum_i m_i * eta_i * ||g_i^t||^2,    m_i = n_i / sum_j n_j.

A round is inside a CLP when FGN is still rising fast enough (Eq. 6):

    (FGN(t) - FGN(t-1)) / FGN(t-1) > delta.

Choices
-------
* ``m_i`` is normalised by default over the clients that reported in round t
  (Eq. 5 sums over the round's K selected clients), so the round's weights sum
  to 1. The paper's definition, m_i = n_i / sum_j n_j, "the proportion of the
  total data held by client C_i" (Problem formulation), reads literally as a
  share of *all* clients' data: ``total=`` (PA3Fed's ``fgn_weights = "total"``)
  divides by that instead, so a round's weights sum to its clients' share of
  the data, and FGN(t) moves with which clients were sampled.
* ``eta`` is kept as in Eq. 4 (``scale_by_lr=True``); with a decaying
  learning rate it lowers FGN(t)/FGN(t-1) by the decay factor every round.
  ``scale_by_lr=False`` drops it, leaving the weighted squared gradient norm.
* The first round has no FGN(t-1): it is outside the CLP unless
  ``first=True``. When FGN(t-1) = 0 the round counts as a CLP round iff
  FGN(t) > 0 (an infinite relative rise).
"""

from __future__ import annotations

import math
from typing import Sequence


def federated_gradient_norm(
    grad_norms: Sequence[float],
    num_samples: Sequence[int],
    lrs: Sequence[float] | None = None,
    *,
    scale_by_lr: bool = True,
    total: int | None = None,
) -> float:
    """FGN(t) = sum_i m_i * eta_i * ||g_i||^2 (Eq. 5) from each client's gradient norm ||g_i||.

    ``m_i = n_i / total``; ``total=None`` is the sum of the given ``num_samples`` (the round's clients), an int
    the rows of all clients (the paper's literal m_i), which must be at least that sum.
    """
    if not grad_norms or len(grad_norms) != len(num_samples):
        raise ValueError("need one gradient norm and one sample count per client")
    sampled = float(sum(num_samples))
    if sampled <= 0:
        raise ValueError("sample counts must sum to > 0")
    if total is not None and total < sampled:
        raise ValueError(f"total rows {total} is below the round's {sampled:.0f}: it must count every client's")
    denominator = sampled if total is None else float(total)
    if scale_by_lr:
        if lrs is None or len(lrs) != len(grad_norms):
            raise ValueError("scale_by_lr needs one learning rate per client")
        etas = [float(lr) for lr in lrs]
    else:
        etas = [1.0] * len(grad_norms)
    return sum(n / denominator * eta * float(g) ** 2 for n, eta, g in zip(num_samples, etas, grad_norms))


def is_clp(previous: float | None, current: float, delta: float, *, first: bool = False) -> bool:
    """Eq. 6: relative rise of FGN above ``delta``; ``previous=None`` is the first round."""
    if previous is None:
        return first
    if previous == 0:
        return current > 0
    rise = (current - previous) / previous
    return not math.isnan(rise) and rise > delta


def detect_clp(fgn_sequence: Sequence[float], delta: float, *, first: bool = False) -> list[bool]:
    """CLP flag of every round of an FGN curve (Eq. 6 applied to consecutive rounds)."""
    flags: list[bool] = []
    previous: float | None = None
    for value in fgn_sequence:
        flags.append(is_clp(previous, float(value), delta, first=first))
        previous = float(value)
    return flags

"""Soft-label aggregation: DS-FL's ERA and SCARLET's Enhanced ERA.

Checked against papers/scarlet.txt Eq. 2 and 4 and App. A, and kitsuyaazuma/SCARLET ``algorithm/dsfl.py`` (ERA: softmax(mean / T)) and ``algorithm/scarlet.py`` (Enhanced ERA: mean**beta / sum),
2026-12-02.

Both start from the (optionally weighted) mean of the clients' soft-labels on
the same public samples, ``zbar = (1/K) sum_k z_k`` (SCARLET Eq. 2 and 4):

* ERA (DS-FL, SCARLET Eq. 2): ``zhat = Softmax(zbar | T) = softmax(zbar / T)``.
  The softmax is applied to the averaged *soft-labels* (probabilities), not to
  logits: SCARLET states that "soft-labels" are the normalised outputs, and
  Eq. 2 feeds their mean to the tempered softmax. A consequence is that T = 1
  is *not* the identity: softmax of a probability vector is flatter than it.
* Enhanced ERA (SCARLET Eq. 4): ``zhat_i = zbar_i**beta / sum_j zbar_j**beta``.
  beta = 1 is the identity; for beta2 > beta1 > 0 the result for beta2 is
  majorised by the one for beta1, so entropy falls monotonically with beta
  (SCARLET Appendix A, Theorem 1).

Choices
-------
* Client weights: the paper uses the plain mean (1/K). ``weights`` lets a
  caller weight clients (e.g. by private-set size); they are normalised to sum
  to 1, and ``None`` reproduces the paper.
* Enhanced ERA is computed in log space (``softmax(beta * log zbar)``) in
  float64, so large beta neither underflows to 0/0 nor overflows; zero entries
  stay exactly zero (0**beta = 0 for beta > 0).
* beta = 1 returns zbar unchanged. Eq. (4) then reads zbar / sum(zbar), and a
  mean of probability vectors already sums to 1; renormalising would only move
  the last float bits. Returning it as is makes SCARLET with beta = 1 and D = 0
  *bit for bit* DS-FL with ``aggregation = "mean"`` (ERA replaced by the plain
  mean), the ablation that separates Enhanced ERA's sharpening from the cache.

Checked against: kitsuyaazuma/SCARLET (branch ``reproducibility``) ``src/algorithm/dsfl.py`` (ERA: ``softmax(mean_prob / era_temperature)``
on averaged probabilities) and ``src/algorithm/scarlet.py`` (``mean**era_exponent / sum``); its
``main`` branch ``src/scarlet/algorithm/dsfl.py``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from chillfl.errors import ConfigError
from chillfl.options import require
from chillfl.protocols.softlabels.labels import entropy, mean_soft_labels
from chillfl.temperature.base import MAX_TEMPERATURE, MIN_TEMPERATURE

__all__ = ["MAX_BETA", "enhanced_era", "entropy", "era", "mean_soft_labels", "power_sharpen", "require_beta", "require_era_temperature",
           "tempered_softmax"]
"""``entropy`` and ``mean_soft_labels`` are the protocol's, shared by every method; named here too, where ERA is."""


MAX_BETA = 1e4
"""The largest Enhanced ERA beta: at 1e4 a ratio of 1.001 between two mean probabilities is already one of e^10, and
towards 1e308 ``beta * log p`` is -inf for every class (max p < 0.17 at 1e308), so the rows were nan."""


def require_era_temperature(value: float, field: str) -> None:
    """A ConfigError on ``field`` unless ``value`` is an ERA temperature in [1e-4, 1e4], the bounds of a training temperature."""
    require(math.isfinite(value) and MIN_TEMPERATURE <= value <= MAX_TEMPERATURE, field,
            f"must be in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}] (ERA divides the clients' mean soft-label by T: at 1e-4 a gap of "
            f"1e-3 between two classes is already a factor e^10, and below 1e-308 p / T overflows to nan), got {value}")


def require_beta(value: float, field: str) -> None:
    """A ConfigError on ``field`` unless ``value`` is an Enhanced ERA beta in (0, :data:`MAX_BETA`]."""
    require(0 < value <= MAX_BETA, field,
            f"must be in (0, {MAX_BETA:g}] (Enhanced ERA raises the clients' mean soft-label to the power beta: at 1e4 a ratio of "
            f"1.001 is already one of e^10, and near 1e308 beta * log p overflows to nan), got {value}")


def tempered_softmax(probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(p / T) over the last axis: the ERA map applied to an averaged soft-label; T in [1e-4, 1e4]."""
    require_era_temperature(temperature, "era.temperature")
    return torch.softmax(probs.to(torch.float64) / temperature, dim=-1).to(probs.dtype)


def power_sharpen(probs: torch.Tensor, beta: float) -> torch.Tensor:
    """p**beta / sum p**beta over the last axis: the Enhanced ERA map (Eq. 4) of an averaged soft-label.

    beta = 1 returns ``probs`` itself (the plain mean; see the module's Choices). beta in (0, :data:`MAX_BETA`].
    """
    require_beta(beta, "enhanced_era.beta")
    if beta == 1.0:
        return probs
    p = probs.to(torch.float64)
    if bool((p < 0).any()):  # rows off the simplex (a plugin's forged rows or release): one line, not a bare ValueError
        raise ConfigError("distillation.method", f"Enhanced ERA takes non-negative probability rows, but the clients' mean soft-label has a negative entry "
                                                 f"({float(p.min()):.3g}): what sends rows (a plugin's [privacy] release or [attack] forge) "
                                                 "must project each onto the simplex, clamped at 0 and renormalised")
    # log(0) = -inf -> weight 0 after softmax; exact zeros stay zero.
    return torch.softmax(beta * torch.log(p), dim=-1).to(probs.dtype)


def era(soft_labels: torch.Tensor, temperature: float, weights: torch.Tensor | Sequence[float] | None = None) -> torch.Tensor:
    """DS-FL's Entropy Reduction Aggregation (SCARLET Eq. 2): softmax(mean_k z_k / T), ``[K, n, C] -> [n, C]``."""
    return tempered_softmax(mean_soft_labels(soft_labels, weights), temperature)


def enhanced_era(soft_labels: torch.Tensor, beta: float, weights: torch.Tensor | Sequence[float] | None = None) -> torch.Tensor:
    """SCARLET's Enhanced ERA (Eq. 4): zbar**beta renormalised, ``[K, n, C] -> [n, C]``; beta = 1 is the plain mean."""
    return power_sharpen(mean_soft_labels(soft_labels, weights), beta)

"""Soft-label aggregation: DS-FL's ERA and SCARLET's Enhanced ERA.

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
"""

from __future__ import annotations

from typing import Sequence

import torch

from chillfl.errors import ConfigError


def _client_weights(num_clients: int, weights: torch.Tensor | Sequence[float] | None) -> torch.Tensor:
    """Normalised float64 client weights (uniform when ``weights`` is None)."""
    if weights is None:
        return torch.full((num_clients,), 1.0 / num_clients, dtype=torch.float64)
    w = torch.as_tensor(weights, dtype=torch.float64).flatten()
    if w.numel() != num_clients:
        raise ValueError(f"expected {num_clients} client weights, got {w.numel()}")
    if bool((w < 0).any()) or float(w.sum()) <= 0.0:
        raise ValueError(f"client weights must be >= 0 with a positive sum, got {w.tolist()}")
    return w / w.sum()


def mean_soft_labels(soft_labels: torch.Tensor, weights: torch.Tensor | Sequence[float] | None = None) -> torch.Tensor:
    """zbar = sum_k w_k z_k over clients: ``[K, n, C] -> [n, C]`` (w_k = 1/K by default).

    Accumulated in float64 and cast back to the input dtype.
    """
    if soft_labels.dim() != 3:
        raise ValueError(f"soft_labels must be [K, n, C], got shape {tuple(soft_labels.shape)}")
    w = _client_weights(soft_labels.shape[0], weights)
    mean = torch.einsum("k,knc->nc", w, soft_labels.to(torch.float64))
    return mean.to(soft_labels.dtype)


def tempered_softmax(probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(p / T) over the last axis: the ERA map applied to an averaged soft-label."""
    if not temperature > 0:
        raise ConfigError("era.temperature", f"must be > 0, got {temperature}")
    return torch.softmax(probs.to(torch.float64) / temperature, dim=-1).to(probs.dtype)


def power_sharpen(probs: torch.Tensor, beta: float) -> torch.Tensor:
    """p**beta / sum p**beta over the last axis: the Enhanced ERA map (Eq. 4) of an averaged soft-label.

    beta = 1 returns ``probs`` itself (the plain mean; see the module's Choices).
    """
    if not beta > 0:
        raise ConfigError("enhanced_era.beta", f"must be > 0, got {beta}")
    if beta == 1.0:
        return probs
    p = probs.to(torch.float64)
    if bool((p < 0).any()):
        raise ValueError("soft-labels must be non-negative")
    # log(0) = -inf -> weight 0 after softmax; exact zeros stay zero.
    return torch.softmax(beta * torch.log(p), dim=-1).to(probs.dtype)


def era(soft_labels: torch.Tensor, temperature: float, weights: torch.Tensor | Sequence[float] | None = None) -> torch.Tensor:
    """DS-FL's Entropy Reduction Aggregation (SCARLET Eq. 2): softmax(mean_k z_k / T), ``[K, n, C] -> [n, C]``."""
    return tempered_softmax(mean_soft_labels(soft_labels, weights), temperature)


def enhanced_era(soft_labels: torch.Tensor, beta: float, weights: torch.Tensor | Sequence[float] | None = None) -> torch.Tensor:
    """SCARLET's Enhanced ERA (Eq. 4): zbar**beta renormalised, ``[K, n, C] -> [n, C]``; beta = 1 is the plain mean."""
    return power_sharpen(mean_soft_labels(soft_labels, weights), beta)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats over the last axis, with 0 * log 0 = 0: ``[..., C] -> [...]``."""
    p = probs.to(torch.float64)
    out_dtype = probs.dtype if probs.is_floating_point() else torch.float64
    return (-torch.special.xlogy(p, p).sum(dim=-1)).to(out_dtype)

"""Soft-label arithmetic every method shares: the clients' mean, the masked mean, entropy and the distillation losses.

A method's own aggregation map (a tempered softmax, a sharpening, a quantiser) lives with the
method; what is here is what the protocol itself needs to average, distil and report.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from chillfl.engine.predict import outputs
from chillfl.training.terms import half_to_float

Params = dict[str, torch.Tensor]


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


def masked_mean(soft_labels: torch.Tensor, keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Average ``[K, n, C]`` over the clients that kept each sample (``keep``: bool ``[K, n]``).

    Returns ``(mean [n, C], counts [n])``; rows with count 0 are zero and must be dropped.
    """
    if keep.shape != soft_labels.shape[:2]:
        raise ValueError(f"keep must be [K, n] = {tuple(soft_labels.shape[:2])}, got {tuple(keep.shape)}")
    w = keep.to(torch.float64)
    counts = w.sum(dim=0)
    total = torch.einsum("kn,knc->nc", w, soft_labels.to(torch.float64))
    mean = total / counts.clamp_min(1.0).unsqueeze(-1)
    return mean.to(soft_labels.dtype), counts.to(torch.int64)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """Shannon entropy in nats over the last axis, with 0 * log 0 = 0: ``[..., C] -> [...]``."""
    p = probs.to(torch.float64)
    out_dtype = probs.dtype if probs.is_floating_point() else torch.float64
    return (-torch.special.xlogy(p, p).sum(dim=-1)).to(out_dtype)


def soft_target_kl(logits: torch.Tensor, targets: torch.Tensor, temperature: Any = 1.0) -> torch.Tensor:
    """KL(targets || softmax(logits / T)) averaged over the batch: phi_dist of Eq. (3).

    A base loss with the signature of ``temperature_cross_entropy``, so the
    one functional training step (:func:`train_client`) distils too; targets
    with zeros are fine (0 log 0 = 0). Its gradient w.r.t. the logits (T = 1)
    is (softmax(z) - target) / batch. 16-bit logits are divided and log-softmaxed in float32 and the loss is cast
    back to the dtype of logits and targets together, as in ``temperature_cross_entropy`` (a float16 ``z / T`` overflows at small T).
    """
    log_probs = F.log_softmax(half_to_float(logits) / temperature, dim=-1)
    # F.kl_div's own pointwise formula, written out: it has no vmap batching rule (the vectorised executor distils too)
    loss = (torch.xlogy(targets, targets) - targets * log_probs).sum() / logits.shape[0]
    return loss.to(torch.promote_types(logits.dtype, targets.dtype))  # the dtype it had when computed in the logits' own


def weighted_kl(weight: float) -> Any:
    """``weight * soft_target_kl`` (a regulariser weight on the distillation); weight 1 returns the plain loss."""
    if weight == 1.0:
        return soft_target_kl

    def loss(logits: torch.Tensor, targets: torch.Tensor, temperature: Any = 1.0) -> torch.Tensor:
        return weight * soft_target_kl(logits, targets, temperature)

    return loss


def predict_proba(model: nn.Module, state: Params, x: torch.Tensor, batch_size: int = 1024, *, logits: bool = False) -> torch.Tensor:
    """sigma(x; w): softmax outputs at T = 1 (``logits``: the raw logits), eval mode, ``[n, C]`` float32.

    The reference prediction (:func:`chillfl.engine.predict.outputs`); a client update yields a
    :class:`~chillfl.engine.predict.PredictJob` instead, so that executors can batch it.
    """
    return outputs(model, state, x, batch_size, logits=logits)

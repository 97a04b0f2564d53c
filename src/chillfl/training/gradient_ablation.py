"""FedChill's gradient ablation (Table 5): temperature magnitude vs. direction.

With temperature the per-sample logit gradient of cross-entropy is (Eq. 2)

    g_T = (softmax(z / T) - y) / T,

which differs from the T = 1 gradient g_1 = softmax(z) - y in two ways: a
larger *magnitude* (the factor 1/T) and a different *direction* (the sharper
softmax). Table 5 separates them:

* ``magnitude_only``: "standard softmax, manually scaled gradients":
  gradient g_1 / T; the reported loss value is CE(z, y).
* ``direction_only``: "temperature-scaled softmax, normalized magnitudes":
  gradient T * g_T = softmax(z / T) - y; the reported loss value is CE(z / T, y).

All losses are batch means, like :func:`temperature_cross_entropy`, and are
built from detached rescale factors (no ``.item()``, no data-dependent
control flow), so they work under ``vmap`` (the vectorised executor) with a
0-d per-client temperature.

Choices
-------
* "Magnitude" is the scalar factor 1/T of Eq. 2: the ablation asks whether
  FedChill is "merely an adaptive learning rate", i.e. a scalar rescaling of
  the T = 1 gradient. Alternative (``*_norm``): match per-sample logit-gradient
  norms, i.e. ``magnitude_only_norm`` gives g_1 * ||g_T|| / ||g_1|| and
  ``direction_only_norm`` gives g_T * ||g_1|| / ||g_T||. These only change the
  gradient w.r.t. the logits (first order); their second derivatives are not
  meaningful.
* The unit direction of g_T is computed on its own, not as g_T / ||g_T||: the
  1/T cancels, and softmax(z/T) - y is proportional to exp((z_j - m) / T) for
  j != y (m the largest non-true logit) with minus their sum at y. That vector
  has an entry 1, so it neither underflows nor divides by a clamped norm: a
  confident sample (T = 0.05, margin 2, ||g_T|| ~ 1e-16) keeps its direction.
  Dividing by ``||g_T||.clamp_min(1e-12)`` scaled such a sample's gradient by
  ||g_T|| / 1e-12, i.e. to ~0. A sample's gradient is zero only where the
  magnitude it is given is zero.
"""

from __future__ import annotations

import types
from typing import Mapping

import torch
import torch.nn.functional as F

from chillfl.training.objective import LossFn, temperature_cross_entropy

def _scaled_gradient(loss: torch.Tensor, factor: torch.Tensor | float) -> torch.Tensor:
    """Value of ``loss``, gradient of ``factor * loss`` (factor is treated as a constant)."""
    if isinstance(factor, torch.Tensor):
        factor = factor.detach()
    return loss.detach() + factor * (loss - loss.detach())


def _with_logit_gradient(value: torch.Tensor, logits: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """Value of ``value``, gradient w.r.t. ``logits`` equal to ``grad`` (already batch-averaged)."""
    surrogate = (logits * grad.detach()).sum()
    return value.detach() + (surrogate - surrogate.detach())


def _softmax_minus_onehot(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    probs = F.softmax(logits, dim=-1)
    classes = torch.arange(logits.shape[-1], device=logits.device)
    onehot = (targets.unsqueeze(-1) == classes).to(probs.dtype)  # F.one_hot is not vmappable
    return probs - onehot


def magnitude_only(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Standard softmax CE with its gradient scaled by 1/T (Table 5, Magnitude-Only)."""
    return _scaled_gradient(F.cross_entropy(logits, targets), 1.0 / temperature)


def direction_only(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Temperature CE with its gradient rescaled by T to the T = 1 magnitude (Table 5, Direction-Only)."""
    return _scaled_gradient(temperature_cross_entropy(logits, targets, temperature), temperature)


def _unit_direction(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Per-sample unit vector along softmax(z/T) - y, ``[B, C]``, without underflow (see the module's Choices).

    Entry j != y is exp((z_j - m) / T), m = max_{k != y} z_k (so the largest is 1), entry y minus their sum; the
    vector is then divided by its norm (>= sqrt 2). Masks and reductions only: vmappable with a 0-d tensor T.
    """
    detached = logits.detach()
    classes = torch.arange(detached.shape[-1], device=detached.device)
    true = targets.unsqueeze(-1) == classes
    others = torch.where(true, torch.full_like(detached, -torch.inf), detached)
    top = others.amax(dim=-1, keepdim=True)
    rel = torch.where(true, torch.zeros_like(detached), torch.exp((others - top) / temperature))
    vec = torch.where(true, -rel.sum(dim=-1, keepdim=True), rel)
    norm = vec.norm(dim=-1, keepdim=True)
    return torch.where(norm > 0, vec / torch.where(norm > 0, norm, torch.ones_like(norm)), torch.zeros_like(vec))


def magnitude_only_norm(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Alternative: T = 1 direction, per-sample norm of the temperature gradient g_T."""
    g_t = _softmax_minus_onehot(logits / temperature, targets) / temperature
    grad = _unit_direction(logits, targets, 1.0) * g_t.norm(dim=-1, keepdim=True) / logits.shape[0]
    return _with_logit_gradient(F.cross_entropy(logits, targets), logits, grad)


def direction_only_norm(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Alternative: temperature direction g_T, per-sample norm of the T = 1 gradient g_1."""
    g1 = _softmax_minus_onehot(logits, targets)
    grad = _unit_direction(logits, targets, temperature) * g1.norm(dim=-1, keepdim=True) / logits.shape[0]
    return _with_logit_gradient(temperature_cross_entropy(logits, targets, temperature), logits, grad)


BASE_LOSSES: Mapping[str, LossFn] = types.MappingProxyType(
    {
        "standard": temperature_cross_entropy,
        "magnitude_only": magnitude_only,
        "direction_only": direction_only,
        "magnitude_only_norm": magnitude_only_norm,
        "direction_only_norm": direction_only_norm,
    }
)
"""Base losses by ``client.loss`` name: (logits, targets, temperature) -> scalar."""

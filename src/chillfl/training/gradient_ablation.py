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
  ``direction_only_norm`` gives g_T * ||g_1|| / ||g_T|| (a zero-norm sample
  keeps a zero gradient). These only change the gradient w.r.t. the logits
  (first order); their second derivatives are not meaningful.
"""

from __future__ import annotations

import types
from typing import Mapping

import torch
import torch.nn.functional as F

from chillfl.training.objective import LossFn, temperature_cross_entropy

_TINY = 1e-12


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


def _norm_ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """Per-sample ||num|| / ||den||, shape [B, 1]; 0 where ||den|| = 0 (then den itself is 0)."""
    return num.norm(dim=-1, keepdim=True) / den.norm(dim=-1, keepdim=True).clamp_min(_TINY)


def magnitude_only_norm(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Alternative: T = 1 direction, per-sample norm of the temperature gradient g_T."""
    g1 = _softmax_minus_onehot(logits, targets)
    g_t = _softmax_minus_onehot(logits / temperature, targets) / temperature
    grad = g1 * _norm_ratio(g_t, g1) / logits.shape[0]
    return _with_logit_gradient(F.cross_entropy(logits, targets), logits, grad)


def direction_only_norm(logits: torch.Tensor, targets: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
    """Alternative: temperature direction g_T, per-sample norm of the T = 1 gradient g_1."""
    g1 = _softmax_minus_onehot(logits, targets)
    g_t = _softmax_minus_onehot(logits / temperature, targets) / temperature
    grad = g_t * _norm_ratio(g1, g_t) / logits.shape[0]
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

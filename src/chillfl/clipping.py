"""Clipping to an L2 bound and the seeded Gaussian noise every privacy mechanism adds (and norm bounding, a robust rule).

A module of its own below both :mod:`chillfl.privacy` and :mod:`chillfl.aggregation`: plain tensor maths that each uses.

Noise is drawn from a ``torch.Generator`` seeded by :func:`chillfl.seeds.derive_seed` from (run seed,
purpose, round, client, ...), never the global RNG: the same seed gives the same noise under every
executor, and a resumed run draws the same noise as an uninterrupted one (the stream is a pure
function of the round, so the checkpoint needs no generator state). Noise is drawn in float64 on the
CPU, one tensor per parameter in key order, then cast: the bits do not depend on the device.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Mapping, Sequence

import torch

Params = dict[str, torch.Tensor]


def float_keys(params: Mapping[str, torch.Tensor]) -> list[str]:
    """The entries DP covers: floating-point tensors (parameters and float buffers); counters stay as they are."""
    return [k for k, v in params.items() if v.is_floating_point()]


def l2_norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all ``tensors`` together, in float64 (a float64 0 for none)."""
    return torch.sqrt(_sum_of_squares(tensors))


def _sum_of_squares(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    for t in tensors:
        total = total + (t.double() ** 2).sum().cpu()
    return total


def clip_factor(norm: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """min(1, C / ||u||): the scale that brings ``u`` within the L2 ball of radius C (1 for u = 0)."""
    return torch.clamp(clip_norm / torch.clamp(norm, min=1e-12), max=1.0)


def _certainly_within(sum_of_squares: torch.Tensor, n: int, bound: float) -> bool:
    """Whether the exact L2 norm of n values is at most ``bound``, proved from their float64 sum of squares.

    The squares of float32, float16 and bfloat16 values are exact in float64, and a float64 sum of n exact terms,
    in any order, is within a relative g = (n - 1) u / (1 - (n - 1) u) of the true one (u = 2^-53; Higham,
    *Accuracy and Stability of Numerical Algorithms*, 2002, (4.4)). So sum * (1 + g) / (1 - g) <= bound^2, checked
    in exact rationals, bounds the true sum and also any other float64 sum of the squares (another reader's
    norm). Tight: one value exactly at ``bound`` passes. float64 entries' squares round: for them, the bound holds
    up to float64's own rounding (there is no wider type to round toward zero from)."""
    total = float(sum_of_squares)
    if not math.isfinite(total):
        return False
    g = Fraction(max(n - 1, 0), 2**53 - max(n - 1, 0))  # (n - 1) u / (1 - (n - 1) u)
    return Fraction(total) * (1 + g) / (1 - g) <= Fraction(bound) ** 2


def _numel(tensors: Sequence[torch.Tensor]) -> int:
    return sum(t.numel() for t in tensors)


def cast_toward_zero(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``exact`` (float64) cast to ``dtype`` rounding toward zero, not to nearest, so that |out_i| <= |exact_i|
    elementwise: a cast that rounded up would push a clipped update's norm past C by up to half a step per entry."""
    out = exact.to(dtype)
    return torch.where(out.double().abs() > exact.abs(), torch.nextafter(out, torch.zeros_like(out)), out)


def _scaled_within(tensors: Sequence[torch.Tensor], scale: torch.Tensor, bound: float) -> list[torch.Tensor]:
    """``tensors`` times ``scale`` (about bound / norm), each rounded toward zero, with an exact L2 norm <= ``bound``.

    Rounding toward zero leaves the product's norm at most the float64 one, but that one can still exceed
    ``bound`` by the float64 roundings of the norm, the scale and the products (when the products happen to be
    representable, e.g. a scale of 1/2): then all entries shrink once more by a relative (4n + 32) float64 steps
    (for n float32 values, one float32 step each toward zero), more than those roundings and any float64
    measurement's can add together (about n + 12 steps), so once is enough."""
    out = [cast_toward_zero(t.double() * scale, t.dtype) for t in tensors]
    if not _certainly_within(_sum_of_squares(out), _numel(out), bound):
        shrink = 1.0 - (4 * _numel(out) + 32) * 2.0**-53
        out = [cast_toward_zero(t.double() * shrink, t.dtype) for t in out]
    return out


def clip_update(update: Mapping[str, torch.Tensor], clip_norm: float) -> tuple[Params, float]:
    """``update`` scaled to L2 norm at most C over all its entries together; and its norm before clipping.

    At most C exactly, not just up to rounding (DP's sensitivity bound, which the accounting assumes): a scaled
    update is rounded toward zero (:func:`_scaled_within`). An update already certainly within C is returned
    bit for bit; one whose float64 norm is within rounding of C is shrunk by a step, as it may be just over."""
    values = list(update.values())
    total = _sum_of_squares(values)
    norm = torch.sqrt(total)  # l2_norm's
    if _certainly_within(total, _numel(values), clip_norm):
        return {k: v.clone() for k, v in update.items()}, float(norm)
    return dict(zip(update, _scaled_within(values, clip_factor(norm, clip_norm), clip_norm))), float(norm)


def clip_per_layer(update: Mapping[str, torch.Tensor], clip_norm: float) -> tuple[Params, bool]:
    """McMahan et al.'s (2018) PerLayerClip with equal budgets: each of the k entries clipped on its own to
    S_j = C / sqrt(k), so that the whole stays within sqrt(sum_j S_j^2) = C; and whether any entry was scaled down.

    Exactly, as :func:`clip_update`: each entry is rounded toward zero and certainly within S_j, and S_j itself
    is rounded down (:func:`_layer_budget`)."""
    if not update:
        return {}, False
    budget = _layer_budget(clip_norm, len(update))
    out: Params = {}
    scaled = False
    for k, v in update.items():
        total = _sum_of_squares([v])
        norm = torch.sqrt(total)  # l2_norm's
        scaled |= bool(norm > budget)
        out[k] = v.clone() if _certainly_within(total, v.numel(), budget) else _scaled_within([v], clip_factor(norm, budget), budget)[0]
    return out, scaled


def _layer_budget(clip_norm: float, k: int) -> float:
    """C / sqrt(k), stepped down where float64 rounded it up: k entries each exactly at S_j must stay within C
    (e.g. C = fl(sqrt 3), k = 3 gives S_j = 1, and three entries of norm 1 would have norm sqrt(3) > C)."""
    budget = clip_norm / k**0.5
    while math.isfinite(budget) and Fraction(budget) ** 2 * k > Fraction(clip_norm) ** 2:
        budget = math.nextafter(budget, 0.0)
    return budget


def gaussian_like(like: Mapping[str, torch.Tensor], std: float, seed: int) -> Params:
    """N(0, std^2) noise shaped like ``like``, from its own generator seeded ``seed`` (float64 on the CPU, then cast)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=gen, dtype=torch.float64) * std).to(device=v.device, dtype=v.dtype) for k, v in like.items()}

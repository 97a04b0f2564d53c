"""Clipping to an L2 bound and the seeded Gaussian noise every privacy mechanism adds (and norm bounding, a robust rule).

A module of its own below both :mod:`chillfl.privacy` and :mod:`chillfl.aggregation`: plain tensor maths that each uses.

Noise is drawn from a ``torch.Generator`` seeded by :func:`chillfl.seeds.derive_seed` from (run seed,
purpose, round, client, ...), never the global RNG: the same seed gives the same noise under every
executor, and a resumed run draws the same noise as an uninterrupted one (the stream is a pure
function of the round, so the checkpoint needs no generator state). Noise is drawn in float64 on the
CPU, one tensor per parameter in key order, then cast: the bits do not depend on the device.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

Params = dict[str, torch.Tensor]


def float_keys(params: Mapping[str, torch.Tensor]) -> list[str]:
    """The entries DP covers: floating-point tensors (parameters and float buffers); counters stay as they are."""
    return [k for k, v in params.items() if v.is_floating_point()]


def l2_norm(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """The L2 norm of all ``tensors`` together, in float64 (a float64 0 for none)."""
    total = torch.zeros((), dtype=torch.float64)
    for t in tensors:
        total = total + (t.double() ** 2).sum().cpu()
    return torch.sqrt(total)


def clip_factor(norm: torch.Tensor, clip_norm: float) -> torch.Tensor:
    """min(1, C / ||u||): the scale that brings ``u`` within the L2 ball of radius C (1 for u = 0)."""
    return torch.clamp(clip_norm / torch.clamp(norm, min=1e-12), max=1.0)


def clip_update(update: Mapping[str, torch.Tensor], clip_norm: float) -> tuple[Params, float]:
    """``update`` scaled to L2 norm at most C over all its entries together; and its norm before clipping."""
    norm = l2_norm(list(update.values()))
    scale = clip_factor(norm, clip_norm)
    return {k: (v.double() * scale).to(v.dtype) for k, v in update.items()}, float(norm)


def clip_per_layer(update: Mapping[str, torch.Tensor], clip_norm: float) -> tuple[Params, bool]:
    """McMahan et al.'s (2018) PerLayerClip with equal budgets: each of the k entries clipped on its own to
    S_j = C / sqrt(k), so that the whole stays within sqrt(sum_j S_j^2) = C; and whether any entry was scaled down."""
    if not update:
        return {}, False
    budget = clip_norm / len(update) ** 0.5
    out: Params = {}
    scaled = False
    for k, v in update.items():
        norm = l2_norm([v])
        scaled |= bool(norm > budget)
        out[k] = (v.double() * clip_factor(norm, budget)).to(v.dtype)
    return out, scaled


def gaussian_like(like: Mapping[str, torch.Tensor], std: float, seed: int) -> Params:
    """N(0, std^2) noise shaped like ``like``, from its own generator seeded ``seed`` (float64 on the CPU, then cast)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(v.shape, generator=gen, dtype=torch.float64) * std).to(device=v.device, dtype=v.dtype) for k, v in like.items()}

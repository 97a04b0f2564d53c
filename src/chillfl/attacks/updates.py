"""What an attacker uploads in place of its honest model (model poisoning), as pure functions of the round's models.

With the round's global model w, attacker i's honestly trained model w_i and its update u_i = w_i - w,
on every floating-point entry (integer buffers, e.g. batch norm's counter, travel as trained):

* ``sign_flip``: ``w - factor * u_i`` (factor 1: the negated update);
* ``scaling`` (model replacement, Bagdasaryan et al. 2020, Eq. 3): ``w + gamma * u_i``, gamma = ``factor``
  or, by default, n / m (the round's n clients over its m attackers: their scaled updates together
  replace the mean, as the paper's gamma = n / eta at the server lr eta = 1 of FedAvg);
* ``gaussian``: ``w + N(0, sigma^2 I)``, drawn from (seed, "attack", "gaussian", round, client): the
  honest update is thrown away;
* ``lie`` ("A Little Is Enough", Baruch et al. 2019, Algorithm 3): every attacker sends the same
  ``mu - z * s``, mu and s the per-coordinate mean and (population) standard deviation of the round's
  *benign* models; by default z = z_max, ``Phi^-1((n - s') / n)`` with ``s' = floor(n/2 + 1) - m``
  (n: the round's clients, m: its attackers). The attackers collude and see the benign models, the
  paper's threat model; with no benign client in the round they use their own honest models.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Mapping, Sequence

import torch

Params = Mapping[str, torch.Tensor]


def float_keys(state: Params) -> list[str]:
    """The entries an attack rewrites: floating-point tensors (integer buffers travel as trained)."""
    return [k for k, v in state.items() if torch.is_floating_point(v)]


def sign_flip(global_params: Params, params: Params, factor: float) -> dict[str, torch.Tensor]:
    """``w - factor * (w_i - w)``."""
    return {**params, **{k: global_params[k] - factor * (params[k] - global_params[k]) for k in float_keys(global_params)}}


def scaling(global_params: Params, params: Params, factor: float) -> dict[str, torch.Tensor]:
    """``w + factor * (w_i - w)``."""
    return {**params, **{k: global_params[k] + factor * (params[k] - global_params[k]) for k in float_keys(global_params)}}


def gaussian(global_params: Params, params: Params, sigma: float, seed: int) -> dict[str, torch.Tensor]:
    """``w + N(0, sigma^2 I)``: drawn on the CPU from ``seed``, in key order, so every device and executor draws the same."""
    gen = torch.Generator().manual_seed(seed)
    out = dict(params)
    for k in float_keys(global_params):
        ref = global_params[k]
        noise = torch.randn(ref.shape, generator=gen, dtype=ref.dtype)
        out[k] = ref + sigma * noise.to(ref.device)
    return out


def z_max(n: int, m: int) -> float:
    """Baruch et al.'s z_max: s = floor(n/2 + 1) - m, z = Phi^-1((n - s) / n) (s clamped to [1, n - 1] for a finite z)."""
    s = min(max(math.floor(n / 2 + 1) - m, 1), n - 1) if n > 1 else 1
    return NormalDist().inv_cdf((n - s) / n) if n > 1 else 0.0


def lie(benign: Sequence[Params], template: Params, z: float) -> dict[str, torch.Tensor]:
    """``mean - z * std`` per coordinate over the ``benign`` models (population std); ``template``'s other entries kept."""
    out = dict(template)
    for k in float_keys(template):
        stack = torch.stack([b[k] for b in benign])
        out[k] = stack.mean(0) - z * stack.std(0, correction=0)
    return out

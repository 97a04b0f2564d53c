"""What an attacker uploads in place of its honest model (model poisoning), as pure functions of the round's models.

With the model w attacker i started from (the round's global model, or the one its downlink sent it:
:meth:`chillfl.attacks.spec.ModelRound.start`), its honestly trained model w_i and its update u_i = w_i - w,
on every floating-point entry (integer buffers, e.g. batch norm's counter, travel as trained):

* ``sign_flip``: ``w - factor * u_i`` (factor 1: the negated update);
* ``scaling`` (model replacement, Bagdasaryan et al. 2020, Eq. 3): ``w + gamma * u_i``, gamma = ``factor``
  or, by default, n / m (the round's n clients over its m attackers: their scaled updates together
  replace the mean, as the paper's gamma = n / eta at the server lr eta = 1 of FedAvg);
* ``gaussian``: ``w + N(0, sigma^2 I)``, drawn from (seed, "attack", "gaussian", round, client): the
  honest update is thrown away;
* ``lie`` ("A Little Is Enough", Baruch et al. 2019, Algorithm 3): every attacker sends the same
  ``mu + z * s``, mu and s the per-coordinate mean and (population) standard deviation of the round's
  *benign* models (the authors' code, moranant/attacking_distributed_learning ``malicious.py``, forges the
  *gradient* ``mean - z std``, which the server subtracts: an update here is a reversed gradient, so the
  same attack on models is ``+ z std``; until 2026-12-01 chillfl sent ``mu - z * s``, the mirror image);
  by default z = z_max, ``Phi^-1((n - s') / n)`` with ``s' = floor(n/2 + 1) - m``
  (n: the round's clients, m: its attackers; ``z_among = "benign"``: ``Phi^-1((n - m - s') / (n - m))``).
  The attackers collude and see the benign models, the paper's threat model; with no benign client in the round they use their own honest models;
* ``ipm`` (inner product manipulation, Xie et al. 2019): every attacker sends ``w - epsilon * mean_j d_j``,
  d_j = w_j - w the round's benign updates;
* ``agnostic`` (Shejwalkar & Houmansadr 2021, the AGR-agnostic attacks, Algorithm 1): every attacker sends
  ``w + mu + gamma * p``, mu the benign updates' mean, p a perturbation (:data:`PERTURBATIONS`) and gamma
  the largest value :func:`gamma_search` finds for which a condition holds (:func:`min_max_holds`,
  :func:`min_sum_holds`), the conditions read through a :class:`Spread` of the benign updates.

The update attacks of several models (``lie``, ``ipm``, ``agnostic``) work in float64 over the float entries and
cast back to each entry's dtype: a mean and a distance over k models in float32 would round differently
from one executor's summation order to another's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Callable, Literal, Mapping, Sequence

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


ZShare = Literal["clients", "benign"]
"""Over whom z_max's share of supporters is read: the round's n clients (Baruch et al.'s Algorithm 3) or its n - m benign ones."""


def z_max(n: int, m: int, among: ZShare = "clients") -> float:
    """Baruch et al.'s z_max: s = floor(n/2 + 1) - m supporters needed, z = Phi^-1((k - s) / k) over k = n clients (their
    Algorithm 3, ``among = "clients"``) or k = n - m benign ones (``"benign"``, the reading of Karimireddy et al.'s and
    most re-implementations' ``ALittleIsEnoughAttack``); s clamped to [1, k - 1] for a finite z, 0 for k <= 1."""
    k = n if among == "clients" else n - m
    if k <= 1:
        return 0.0
    s = min(max(math.floor(n / 2 + 1) - m, 1), k - 1)
    return NormalDist().inv_cdf((k - s) / k)


def lie(benign: Sequence[Params], template: Params, z: float) -> dict[str, torch.Tensor]:
    """``mean + z * std`` per coordinate over the ``benign`` models (population std); ``template``'s other entries kept.

    Plus, because these are models: the paper's forged gradient ``mean - z std`` (Baruch et al.'s code) is, after the
    server's step w - lr g, the model ``w + mean(d) + z std(d)`` of the updates d = -lr g."""
    out = dict(template)
    for k in float_keys(template):
        stack = torch.stack([b[k].double() for b in benign])
        out[k] = (stack.mean(0) + z * stack.std(0, correction=0)).to(template[k].dtype)
    return out


def _updates(global_params: Params, models: Sequence[Params], key: str) -> torch.Tensor:
    """The updates ``w_j - w`` of entry ``key``, stacked in float64: shape (k, *entry)."""
    ref = global_params[key].double()
    return torch.stack([m[key].double() - ref for m in models])


def ipm(global_params: Params, benign: Sequence[Params], template: Params, epsilon: float) -> dict[str, torch.Tensor]:
    """``w - epsilon * mean_j (w_j - w)`` over the ``benign`` models (Xie et al.'s inner product manipulation);
    ``template``'s other entries kept."""
    out = dict(template)
    for k in float_keys(global_params):
        ref = global_params[k]
        out[k] = (ref.double() - epsilon * _updates(global_params, benign, k).mean(0)).to(ref.dtype)
    return out


Perturbation = Literal["std", "unit", "sign"]
PERTURBATIONS: tuple[Perturbation, ...] = ("std", "unit", "sign")
"""Shejwalkar & Houmansadr's perturbations p of the mean benign update mu: ``std``: +(per-coordinate sample std of
the benign updates); ``unit``: -mu / ||mu|| (0 where mu = 0); ``sign``: -sign(mu).

The paper's are of *gradients* g: -std(g), -mu_g / ||mu_g||, -sign(mu_g), forging g_m = mu_g + gamma p_g, and the
server steps w - lr g. An update here is d = w_i - w, -lr g after one step: reversing every update reverses mu, and
p with it for ``unit`` and ``sign``, but not a standard deviation, so the paper's -std(g) is +std(d) here (then
w + mu + gamma p = w - lr g_m at the same gamma)."""


@dataclass(frozen=True)
class Spread:
    """The benign updates d_1..d_k as the AGR-agnostic conditions read them, in float64.

    Since d_m(gamma) - d_i = (mu - d_i) + gamma p, every distance the conditions need is
    ``to_mean[i] + 2 gamma along[i] + gamma^2 p_norm_sq``: testing a gamma costs O(k), not a pass over the model.
    """

    to_mean: torch.Tensor
    """(k,): ||mu - d_i||^2."""
    along: torch.Tensor
    """(k,): <mu - d_i, p>."""
    p_norm_sq: float
    """||p||^2."""
    pairwise: torch.Tensor
    """(k, k): ||d_i - d_j||^2."""

    def distances_sq(self, gamma: float) -> torch.Tensor:
        """(k,): ||d_m(gamma) - d_i||^2 for every benign i."""
        return self.to_mean + 2.0 * gamma * self.along + gamma * gamma * self.p_norm_sq


def min_max_holds(spread: Spread, gamma: float) -> bool:
    """Min-Max's condition: max_i ||d_m - d_i|| <= max_{i,j} ||d_i - d_j|| (compared squared: the same order)."""
    return bool(spread.distances_sq(gamma).max() <= spread.pairwise.max())


Bound = Literal["max", "min"]
"""Min-Sum's bound over the benign updates' summed squared distances: ``max`` (the paper's condition) or ``min`` (the
authors' released code, ``min_score = torch.min(scores)``: a tighter bound, a smaller gamma)."""


def min_sum_holds(spread: Spread, gamma: float, bound: Bound = "max") -> bool:
    """Min-Sum's condition: sum_i ||d_m - d_i||^2 <= max_i sum_j ||d_i - d_j||^2 (``bound = "min"``: min_i)."""
    sums = spread.pairwise.sum(1)
    return bool(spread.distances_sq(gamma).sum() <= (sums.max() if bound == "max" else sums.min()))


def gamma_search(holds: Callable[[float], bool], gamma_init: float, tol: float) -> float:
    """Shejwalkar & Houmansadr's Algorithm 1: the largest gamma found for which ``holds`` (0 when none is).

    gamma = gamma_init, step = gamma_init / 2, gamma_succ = 0; while |gamma_succ - gamma| > tol: where ``holds(gamma)``,
    gamma_succ = gamma and gamma += step, else gamma -= step; then step /= 2. The moves sum to less than gamma_init, so
    the result stays below 2 gamma_init. The loop also ends when step underflows to 0 (a tol below gamma's float
    resolution would otherwise never be met).
    """
    gamma, step, succ = gamma_init, gamma_init / 2, 0.0
    while abs(succ - gamma) > tol and step > 0:
        if holds(gamma):
            succ = gamma
            gamma += step
        else:
            gamma -= step
        step /= 2
    return succ


def agnostic_direction(global_params: Params, benign: Sequence[Params], perturbation: Perturbation) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], Spread]:
    """mu and p (float64, per float entry) of the ``benign`` models' updates, and their :class:`Spread`.

    ``std`` takes the sample standard deviation (divided by k - 1, torch's default, as the authors' released code
    computes it): it needs k >= 2 benign models.
    """
    keys = float_keys(global_params)
    stacks = {k: _updates(global_params, benign, k) for k in keys}
    mu = {k: s.mean(0) for k, s in stacks.items()}
    if perturbation == "std":
        p = {k: s.std(0, correction=1) for k, s in stacks.items()}  # the paper's -std of the gradients (PERTURBATIONS)
    elif perturbation == "unit":
        norm = math.sqrt(sum(float(m.square().sum()) for m in mu.values()))
        p = {k: -m / norm if norm > 0 else torch.zeros_like(m) for k, m in mu.items()}
    else:
        p = {k: -torch.sign(m) for k, m in mu.items()}
    n = len(benign)
    to_mean = torch.zeros(n, dtype=torch.float64)
    along = torch.zeros(n, dtype=torch.float64)
    pairwise = torch.zeros((n, n), dtype=torch.float64)
    p_norm_sq = 0.0
    for k, s in stacks.items():  # on the entries' device; only the (k,) and (k, k) sums come to the CPU
        flat = s.reshape(n, -1)
        off = mu[k].reshape(1, -1) - flat
        to_mean += off.square().sum(1).cpu()
        along += (off @ p[k].reshape(-1)).cpu()
        pairwise += torch.cdist(flat, flat, compute_mode="donot_use_mm_for_euclid_dist").square().cpu()
        p_norm_sq += float(p[k].square().sum())
    return mu, p, Spread(to_mean, along, p_norm_sq, pairwise)


def agnostic(
    global_params: Params,
    benign: Sequence[Params],
    template: Params,
    perturbation: Perturbation,
    condition: Callable[[Spread, float], bool],
    gamma_init: float,
    tol: float,
) -> tuple[dict[str, torch.Tensor], float]:
    """``w + mu + gamma * p`` at the gamma :func:`gamma_search` finds for ``condition`` (``template``'s other entries
    kept), and that gamma."""
    mu, p, spread = agnostic_direction(global_params, benign, perturbation)
    gamma = gamma_search(lambda g: condition(spread, g), gamma_init, tol)
    out = dict(template)
    for k in mu:
        ref = global_params[k]
        out[k] = (ref.double() + mu[k] + gamma * p[k]).to(ref.dtype)
    return out, gamma

"""``dp-fedavg``: client-level DP (McMahan et al. 2018): each update clipped, one Gaussian draw on their sum by the server.

The privacy unit is a client: one subsampled Gaussian step a round for the whole population at
q = clients_per_round / num_clients, so ``delta`` must be below 1/num_clients. Under ``federation.sampling =
"poisson"`` that is the mechanism that runs (every round charged, a skipped one too: the accountant's
``skipped_round``); a round nobody reported releases the noise alone, as the paper's Algorithm 1 does
(:class:`~chillfl.aggregation.base.AggregatesNobody`), and only rounds with 1 .. min_clients - 1 reporting clients,
retried or skipped, add :func:`skipped_mass` to delta. Under the default fixed-size sampling it
is the usual approximation (docs/privacy.md, "Sampling"). The maths is
:class:`chillfl.privacy.aggregate.PrivateAggregation` with server noise and the fixed denominator qW (uniform weights: m = clients_per_round; ``weight_cap`` = w_hat > 0: the paper's
w_i = min(n_i / w_hat, 1), W their sum over the clients). Its own options turn on adaptive clipping (Andrew et al.
2021): :class:`chillfl.privacy.aggregate.AdaptiveClip`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

from chillfl.errors import ConfigError
from chillfl.once import warn_once
from chillfl.options import Scale, require
from chillfl.privacy.spec import Accounting, Charge, MechanismSpec, Noise, Participant, RunSizes

if TYPE_CHECKING:
    from chillfl.aggregation.base import Aggregator
    from chillfl.config import RunConfig
    from chillfl.privacy.aggregate import WeightedMean

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DpFedAvgOptions:
    """``target_quantile`` > 0: adaptive clipping (Andrew et al. 2021): C moves geometrically, at rate ``clip_lr``,
    toward that quantile of the clients' update norms, from a count noised with std ``count_noise``
    (0: max(clients_per_round / 20, noise_multiplier)); ``clip_norm`` is its start. ``weight_cap`` = w_hat > 0: client i's
    clipped update weighs w_i = min(n_i / w_hat, 1) (McMahan et al. 2018: more data, more weight, capped so that one
    client still moves the sum by at most C); 0: uniform weights. ``estimator``: the paper's ``fixed`` f_f (divide by qW)
    or ``clipped`` f_c (divide by max(q W_min, the reporting clients' weight), W_min = ``w_min_share`` x W; sensitivity
    2C / (q W_min), so twice the noise at w_min_share = 1). ``clamp_fraction``: adaptive clipping's noised fraction
    clamped to [0, 1] before the update, as TF-Privacy's ``QuantileEstimatorQuery`` does (post-processing: the same
    epsilon); off, it is used as it is, as in Andrew et al.'s Algorithm 1. ``clipping``: the paper's ClipFn, ``flat`` (the
    update as one vector, to C) or ``per_layer`` (each of its k entries, a parameter or float buffer, to C / sqrt(k): the
    whole stays within C, so the sensitivity and epsilon are the same; fixed clipping only)."""

    target_quantile: float = 0.0
    clip_lr: float = 0.2
    count_noise: Scale = 0.0
    weight_cap: Scale = 0.0
    estimator: Literal["fixed", "clipped"] = "fixed"
    w_min_share: float = 1.0
    clamp_fraction: bool = False
    clipping: Literal["flat", "per_layer"] = "flat"

    def validate(self, section: str) -> None:
        require(0 <= self.target_quantile < 1, f"{section}.target_quantile", f"must be in [0, 1) (0: fixed clipping), got {self.target_quantile}")
        require(math.isfinite(self.clip_lr) and self.clip_lr > 0, f"{section}.clip_lr", f"must be > 0, got {self.clip_lr}")
        require(math.isfinite(self.count_noise) and self.count_noise >= 0, f"{section}.count_noise", f"must be >= 0 (0: the default), got {self.count_noise}")
        require(math.isfinite(self.weight_cap) and self.weight_cap >= 0, f"{section}.weight_cap", f"must be >= 0 (0: uniform weights), got {self.weight_cap}")
        require(math.isfinite(self.w_min_share) and 0 < self.w_min_share <= 1, f"{section}.w_min_share", f"must be in (0, 1] (W_min as a share of W), got {self.w_min_share}")
        require(self.estimator == "clipped" or self.w_min_share == 1.0, f"{section}.w_min_share", "is the clipped estimator's: set estimator = 'clipped'")
        require(self.target_quantile > 0 or not self.clamp_fraction, f"{section}.clamp_fraction", "is adaptive clipping's: set target_quantile > 0")
        require(self.clipping == "flat" or self.target_quantile == 0, f"{section}.clipping",
                "per_layer has no adaptive clip norm (Andrew et al. clip the update as one vector): set target_quantile = 0 or clipping = 'flat'")


def accounts(options: DpFedAvgOptions, sizes: RunSizes) -> Accounting:
    n = sizes.num_clients
    return Accounting(((sizes.per_round / n, sizes.rounds),), 1 / n, f"1/num_clients = {1 / n:.3g} (the privacy unit is a client)")


def charges(options: DpFedAvgOptions, sizes: RunSizes, participants: Sequence[Participant]) -> list[Charge]:
    """One step a round for the population, whoever reported (the fixed denominator keeps the sensitivity C)."""
    return [Charge("clients", sizes.per_round / sizes.num_clients)]


def settle(options: DpFedAvgOptions, noise: Noise) -> DpFedAvgOptions:
    """Adaptive clipping's count noise once sigma is known: the default, and the budget it leaves the updates."""
    if options.target_quantile <= 0:
        return dataclasses.replace(options, count_noise=0.0)
    sigma = noise.noise_multiplier
    count_noise = options.count_noise or max(noise.sizes.per_round / 20, sigma)
    if 2 * count_noise <= sigma:  # the update's share of the budget: sigma_u = (sigma^-2 - (2 sigma_b)^-2)^(-1/2) needs 2 sigma_b > sigma
        raise ConfigError("privacy.count_noise", f"must be > noise_multiplier / 2 = {sigma / 2:.4g} (the count's noise takes part of the budget), got {count_noise}")
    return dataclasses.replace(options, count_noise=count_noise)


def aggregator(options: DpFedAvgOptions, noise: Noise, base: WeightedMean) -> Aggregator:
    from chillfl.privacy.aggregate import AdaptiveClip, PrivateAggregation

    adaptive = AdaptiveClip(options.target_quantile, options.clip_lr, options.count_noise, options.clamp_fraction) if options.target_quantile > 0 else None
    return PrivateAggregation(base, client_noise=False, clip_norm=noise.clip_norm, noise_multiplier=noise.noise_multiplier, expected=noise.sizes.per_round,
                              seed=noise.seed, adaptive=adaptive, weights=capped_weights(options.weight_cap, noise.sizes.client_sizes),
                              w_min_share=options.w_min_share if options.estimator == "clipped" else None, per_layer=options.clipping == "per_layer", nonnegative=noise.nonnegative,
                              frozen=noise.frozen)


def skipped_mass(rounds: int, others: int, rate: float, fewest: int) -> float:
    """rounds * P[1 <= Binomial(others, rate) < fewest]: a bound on the chance that some round's first draw has some, but
    fewer than ``fewest``, reporting clients among ``others`` (each in at ``rate``). Only then does the run differ from the
    sampled Gaussian mechanism the accountant bounds (that round is retried or skipped where Algorithm 1 would release its
    few clients' noised sum), so the reported epsilon holds at delta + (1 + e^epsilon) * this (docs/privacy.md,
    "Sampling"). A first draw with nobody reporting is released as Algorithm 1 does, the noise alone
    (:meth:`chillfl.privacy.aggregate.PrivateAggregation.aggregates_nobody`): it adds nothing, so the default
    ``fewest`` = 1 gives 0."""
    below = sum(math.comb(others, k) * rate**k * (1 - rate) ** (others - k) for k in range(1, min(fewest, others + 1)))
    return rounds * below


def check(options: DpFedAvgOptions, config: RunConfig) -> None:
    """Under Poisson client sampling, a warning when skipped rounds add more than ``delta`` itself to the bound's delta.

    A straggler dropped (``straggler_policy = "drop"``) reports nothing, as a client that dropped out: it lowers the
    reporting rate too, which the warning missed (stragglers = 0.9 with drop reported at q / 10 without a word)."""
    fed = config.federation
    if fed.sampling == "poisson":
        lost = 1 - (1 - fed.dropout) * (1 - (fed.stragglers if fed.straggler_policy == "drop" else 0.0))
        _warn_skips(fed.rounds, fed.num_clients, fed.sample_size(), lost, fed.min_clients, config.privacy.delta)


def _warn_skips(rounds: int, num_clients: int, per_round: int, lost: float, fewest: int, delta: float) -> None:
    """``lost``: the chance that a sampled client does not report (dropout, and stragglers where they are dropped).

    Said once a call (:func:`~chillfl.once.warn_once`: the plan is asked for more than once a build) and again by the
    next call; only the sum is cached (:func:`_skipped_mass`): a cached warning was said by a process's first call alone."""
    rate = per_round / num_clients * (1 - lost)
    mass = _skipped_mass(rounds, num_clients - 1, rate, fewest)
    if 2 * mass > delta:  # (1 + e^epsilon) >= 2
        void = "; at least 2 x %.3g >= 1, so it holds no guarantee at all" % mass if 2 * mass >= 1 else ""  # a delta of 1 or more bounds nothing
        warn_once(log, "privacy.delta: with Poisson sampling at a reporting rate q x (1 - dropout) x (1 - dropped stragglers) = %.3g over %d clients, a round has 1 to min_clients - 1 = %d "
                       "reporting clients often enough that retrying or skipping it adds (1 + e^epsilon) x %.3g to delta = %.3g: the reported epsilon "
                       "holds at that larger delta%s (more clients, a larger clients_per_round or min_clients = 1 shrink it; docs/privacy.md, \"Sampling\")"
                       % (rate, num_clients, fewest - 1, mass, delta, void))


_skipped_mass = functools.lru_cache(maxsize=16)(skipped_mass)
""":func:`skipped_mass`, once per setting: the check runs at each of a build's plans."""


def capped_weights(cap: float, client_sizes: Sequence[int]) -> tuple[float, ...] | None:
    """McMahan et al.'s w_i = min(n_i / w_hat, 1) of every client by id (None for cap 0: uniform weights)."""
    return None if cap <= 0 else tuple(min(n / cap, 1.0) for n in client_sizes)


SPEC = MechanismSpec(
    "dp-fedavg",
    DpFedAvgOptions,
    accounts,
    summary="client-level DP: updates clipped to C, one N(0, (sigma C)^2) draw on their sum by the server (optionally adaptive C)",
    charges=charges,
    aggregator=aggregator,
    settle=settle,
    check=check,
)

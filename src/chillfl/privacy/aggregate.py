"""``dp-fedavg`` and ``local``: each client's update clipped (and, ``local``, noised by the client), around a weighted-average aggregator.

DP-FedAvg (McMahan et al. 2018, Algorithm 1, estimator f_f): with the round's global
model w and client i's trained model w_i, the update u_i = w_i - w over every float entry that the
base aggregates (its :func:`~chillfl.aggregation.base.aggregated_keys`: all of them but, e.g., FedPer's
head under ``global_head = "keep"``) is clipped to L2 norm C (their FlatClip; ``per_layer``: their PerLayerClip, each of its k entries to C / sqrt(k)), weighted by w_i in [0, 1] (1: uniform, the
default; ``weights``: the paper's w_i = min(n_i / w_hat, 1)), the server adds z ~ N(0, (sigma C)^2 I) to
the weighted sum and divides by the **fixed** denominator qW (W = sum of w_i over all N clients, q = m / N,
m = ``clients_per_round``; uniform: qW = m, the expected number of clients), not by the weight that
reported: w_i <= 1 keeps the sum's sensitivity to one client at C, so the noised mean is
(sigma, q)-subsampled Gaussian whatever the dropout. A round nobody reported (Poisson sampling drew nobody, or every
drawn client dropped out) releases the noise alone, w + z/(qW), as Algorithm 1 does: the round loop runs it where it
would skip the round (:meth:`PrivateAggregation.aggregates_nobody`), so that the run is that mechanism on every draw.
``w_min_share``: their estimator f_c instead, the sum
divided by max(q W_min, sum of the reporting w_i) and noised 2 sigma C / (q W_min) on the mean (sensitivity
2C / (q W_min), their Lemma 1), W_min = w_min_share x W. ``local``: client i adds its own
z_i ~ N(0, (sigma C)^2 I) to its clipped update and the server takes the plain mean over the n clients
that reported.

The wrapper runs the base's own server rule (FedAvg, FedProx, FedAdam, ...: any base that declares
``takes_weights``, i.e. a weighted mean of the clients' models) on models rebuilt from the privatised
updates: with weights 1/n each and ``w + (w_i clip(u_i) + z/n) n/(qW)`` as client i's model, the base's mean
is ``w + (sum_i w_i clip(u_i) + z) / (qW)`` exactly (up to float rounding); with n = 0 the base gets one model,
``w + z/(qW)`` (f_c: ``w + z/(q W_min)``, z of std 2 sigma C), at weight 1 (client id :data:`NOBODY`; a base that
reads more than the models and weights is refused under privacy already: ``reports``, ``plain_sgd``). A server
optimiser (FedAdam) then acts on that noised mean: post-processing, no privacy cost. Under adaptive clipping the
count is released in such a round too (no bit, its noise alone). The entries the base does not aggregate take
no part in the sensitivity: it does not read them into the global model, and leaving them out of the clip
keeps the client's personal part from shrinking its shared update (no noise is drawn for them). The model's frozen
parameters (``requires_grad = False``, ``frozen``) are left out of the clip and the noise too, and are never taken
from a client: under both mechanisms (and from an exempt client) the base gets the server's own value in their
place (the client's start: the global model, or the model the method sent it). An honest client sends them back
unchanged, so that is the same model; a model-poisoning client (``[attack]``) that moves them moves nothing, where
taking them as sent would let it walk a frozen backbone by any amount, unclipped. Under ``local`` (an untrusted
server) the entries the base does not aggregate are the global model's too, so that nothing the server holds comes
from a client unprivatised.

A client the method sent a model of its own to start from (``Downlink.params``: FedMut's mutated models) has the
update u_i = w_i - s_i from that start s_i, not from w: clipping w_i - w would clip the server's mutation, which is
not the client's data. Its model is rebuilt as ``s_i + (w_i clip(u_i) + z/n) n/(qW)``, so the base's mean is
``mean_i s_i + (sum_i w_i clip(u_i) + z) / (qW)``: the starts' mean (FedMut's balanced mutations cancel in it, as
without privacy) plus the noised mean update. The starts are the server's own, made from models already released,
so they add nothing to the sensitivity.

Clipping and noise are computed where the server receives the models, in the driver: in a simulation
that is the same arithmetic as on the client (``local``'s noise comes from the client's own stream,
derived from (seed, round, client)); the uploaded bytes are the same either way (the entries the base aggregates).

Adaptive clipping (Andrew et al. 2021, Algorithm 1 with the geometric update), ``dp-fedavg`` only: with
the round's clip norm C_t, each client's bit b_i = 1[||u_i|| <= C_t]; the server's noised fraction
b = (sum_i (b_i - 1/2) + N(0, sigma_b^2)) / m + 1/2 (centred bits: sensitivity 1/2) moves C_{t+1} = C_t exp(-eta (b - gamma)) toward the gamma-quantile
of the update norms. The count takes part of the budget: the updates' noise multiplier becomes
sigma_u = (sigma^-2 - (2 sigma_b)^-2)^(-1/2), so that the two releases together are the configured
sigma's Gaussian mechanism (their Section 3) and the accountant is unchanged. b is used as it is (the paper's
Algorithm 1), or clamped to [0, 1] first under ``clamp_fraction`` (TF-Privacy's). C_t is server state, saved in
checkpoints.

Checked against: McMahan et al. 2018 ("Learning differentially private recurrent language models") Algorithm 1,
estimators f_f and f_c and Lemma 1 (sensitivities S/(qW) and 2S/(qW_min)); Andrew et al. 2021 Algorithm 1 and
Sec. 3 (sigma_u); tensorflow/privacy ``quantile_estimator_query.py`` (bits centred by 1/2, noised sum over the
expected count, plus 1/2, geometric update; it also clamps the fraction to [0, 1], which the paper does not: chillfl
does so only under ``clamp_fraction``, docs/privacy.md) and tensorflow/federated ``DifferentiallyPrivateFactory.gaussian_adaptive``
(value noise (z^-2 - (2 sigma_b)^-2)^-1/2, refused unless 2 sigma_b > z, sigma_b = 0.05 m by default), 2026-12-02.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from typing import Any, Collection, Mapping, Protocol, Sequence

import torch

from chillfl.aggregation.base import AroundAggregator, ClientHalf, ClientResult, Downlink, Params, SentStarts, aggregated_keys, check_state_keys
from chillfl.engine.record import Json
from chillfl.errors import Diverged
from chillfl.clipping import clip_per_layer, clip_update, float_keys, gaussian_like
from chillfl.seeds import derive_seed


class WeightedMean(Protocol):
    """What the wrapper needs of its base: an aggregator whose ``aggregate`` takes per-client ``weights`` (``takes_weights``)."""

    def client_half(self) -> ClientHalf | None: ...

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink: ...

    def begin_round(self, round: int, client_ids: Sequence[int]) -> None: ...

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params: ...

    def round_metrics(self) -> Mapping[str, Json]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@dataclass(frozen=True)
class AdaptiveClip:
    """Andrew et al.'s geometric clip-norm update: target quantile gamma, rate eta, count noise std sigma_b; ``clamp``: the
    noised fraction clamped to [0, 1] first (TF-Privacy's ``QuantileEstimatorQuery``), so that C moves by at most
    e^(eta gamma) up or e^(-eta (1 - gamma)) down a round; off, the paper's unclamped estimate."""

    quantile: float
    lr: float
    count_noise: float
    clamp: bool = False

    def next_clip(self, clip: float, fraction: float, round: int | None = None) -> float:
        """C_{t+1} = C_t exp(-eta (b - gamma)) from the noised fraction b (clamped to [0, 1] under ``clamp``).

        ``round`` (0-based) given: a C_{t+1} of 0, subnormal (below 2.2e-308: no update survives its clip) or inf stops the run (:class:`Diverged` naming ``privacy.clip_lr``). Why: a
        large eta overflowed ``math.exp`` (a traceback), sent C to 0 (every later round averaged zero updates, silently) or
        to inf (an inf noise reported as a diverged model)."""
        if self.clamp:
            fraction = min(max(fraction, 0.0), 1.0)
        step = -self.lr * (fraction - self.quantile)
        try:
            new = clip * math.exp(step)
        except OverflowError:  # exp(step) alone past 1.8e308: C_t e^step may still be finite
            new = _exp(math.log(clip) + step) if clip > 0 else 0.0
        if round is not None and not sys.float_info.min <= new < math.inf:  # 0, subnormal (its updates clipped to nothing) or inf
            raise Diverged(round + 1, f"the adaptive clip norm went from {clip:.3g} to {new:.3g} (C_t * exp(-clip_lr * ({fraction:.3g} - "
                                      f"target_quantile {self.quantile:g})) with clip_lr {self.lr:g}); lower privacy.clip_lr")
        return new

    def update_noise(self, sigma: float) -> float:
        """sigma_u = (sigma^-2 - (2 sigma_b)^-2)^(-1/2): the updates' share of the budget."""
        return float((sigma**-2 - (2 * self.count_noise) ** -2) ** -0.5)


def _exp(x: float) -> float:
    """e^x, inf past float64's range (``math.exp`` raises there)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


NOBODY = -1
"""The client id of the one model the base is given in a round nobody reported: the global model plus the noise alone."""


class PrivateAggregation(AroundAggregator):
    """Clip each client's update to C, add Gaussian noise (server: one draw on the sum; ``client_noise``: one per client), then the base's mean.

    Server noise with no client result: the noise alone, on the fixed denominator (:meth:`aggregates_nobody`).

    Update, clip and noise cover the entries the base aggregates (:func:`~chillfl.aggregation.base.aggregated_keys`)
    but the ``frozen`` parameters; the ``frozen`` ones reach the base as the client's start (the server's own value,
    whatever the client sent: no upload moves them); the rest of each model goes to the base as the client sent it
    (server noise) or as the global model's (``client_noise``: the client keeps it)."""

    base: WeightedMean

    def __init__(
        self, base: WeightedMean, *, client_noise: bool, clip_norm: float, noise_multiplier: float, expected: int, seed: int, adaptive: AdaptiveClip | None = None,
        weights: Sequence[float] | None = None, w_min_share: float | None = None, exempt: frozenset[int] = frozenset(), per_layer: bool = False,
        nonnegative: Collection[str] = frozenset(), frozen: Collection[str] = frozenset(),
    ) -> None:
        super().__init__(base)
        self.client_noise = client_noise
        self.clip_norm = clip_norm
        self.adaptive = adaptive
        self.noise_multiplier = noise_multiplier
        self.expected = expected
        self.seed = seed
        self.weights = None if weights is None else tuple(float(w) for w in weights)
        """Server noise only: w_i in [0, 1] of every client by id (None: all 1). The updates' denominator is then
        qW = expected * mean(w), the expected weight of a round (McMahan et al.'s fixed-denominator estimator)."""
        self.w_min_share = w_min_share
        """Server noise only: None, the fixed denominator qW (f_f); else McMahan et al.'s f_c, W_min = this share of W:
        divide by max(q W_min, the reporting clients' weight), noise std 2 sigma C / (q W_min) on that mean."""
        if self.weights is not None and not all(0.0 <= w <= 1.0 for w in self.weights):  # a weight above 1 would raise the sensitivity above C
            raise ValueError(f"PrivateAggregation: every client weight must be in [0, 1], got {self.weights}")
        if exempt and not client_noise:  # the server clips and noises every upload: no client can skip that
            raise ValueError(f"PrivateAggregation: exempt clients {sorted(exempt)} need client_noise (a client-side mechanism to skip)")
        if per_layer and adaptive is not None:  # Andrew et al.'s bits compare one norm with one C_t
            raise ValueError("PrivateAggregation: per-layer clipping has no adaptive clip norm (Andrew et al. clip the update as one vector)")
        self.per_layer = per_layer
        """McMahan et al.'s PerLayerClip: each of the k entries clipped to C / sqrt(k) (the whole within C); off, FlatClip."""
        self.exempt = frozenset(exempt)
        """``client_noise`` only: clients whose uploads pass as sent, neither clipped nor noised (attackers that skip the
        client-side mechanism, ``attack.local_dp = "skip"``): given when the wrapper is built (the mechanism's hook passes
        :attr:`~chillfl.privacy.spec.Noise.exempt`), so the wrapper is whole once made, not changed by the attack's builder."""
        self.nonnegative = frozenset(nonnegative)
        """Entries that are variances (the model's norm layers' ``running_var``, :attr:`~chillfl.privacy.spec.Noise.nonnegative`):
        clamped at 0 in the new global model. Noise takes a variance near 0 below it, and a BatchNorm layer's output is then
        NaN (sqrt of a negative): every later evaluation would be NaN. The clamp reads nothing but the released model,
        so it is post-processing and costs no privacy."""
        self.frozen = frozenset(frozen)
        """The model's frozen parameters (``requires_grad = False``, :attr:`~chillfl.privacy.spec.Noise.frozen`): no client
        moves them, so they are neither clipped nor noised nor counted in per-layer clipping's k, and the base gets the
        client's start in their place (the server's own value). Noised, a frozen (pretrained) backbone took a random walk
        every round; taken as sent, a model-poisoning client moved it by any amount, past the clip."""
        self._metrics: dict[str, Json] = {}
        self.sent = SentStarts()
        """What this round's downlinks told each client to start from (FedMut's mutated models): its update is taken from that."""

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return self.sent.record(client_id, round, self.base.downlink(client_id, round, global_params))

    def reads_updates(self) -> bool:
        """It clips each client's update w_i - start_i (:class:`~chillfl.aggregation.base.ReadsUpdates`)."""
        return True

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        read = set(aggregated_keys(self.base, global_params))  # what the base averages: the sum whose sensitivity is C
        keys = [k for k in float_keys(global_params) if k in read and k not in self.frozen and all(k in r.params for r in results)]
        clip = self.clip_norm  # this round's C (adaptive: C_t)
        sigma = self.noise_multiplier if self.adaptive is None else self.adaptive.update_noise(self.noise_multiplier)
        std = sigma * clip
        n = len(results)
        w = self.weights
        denominator = n if self.client_noise else self.expected * (1.0 if w is None else sum(w) / len(w))  # qW
        if self.w_min_share is not None and not self.client_noise:  # f_c: max(q W_min, sum of the reporting weights); noise 2 sigma C / (q W_min) on the mean
            floor = self.w_min_share * denominator
            denominator = max(floor, float(n) if w is None else sum(w[r.client_id] for r in results))
            std = 2 * std * denominator / floor  # on the sum, which is divided by the denominator
        server_noise = None if self.client_noise else gaussian_like({k: global_params[k] for k in keys}, std, derive_seed(self.seed, "privacy", "server", round))
        private: list[ClientResult] = []
        clipped = 0
        starts = self.sent.starts(round, global_params, results, self.base)
        for r in results:
            start = starts.get(r.client_id, global_params)  # a model of its own (FedMut's mutation): the update is the client's training alone
            # frozen entries: the server's own value, whatever came back (an honest client's is the same; a forged one moves nothing)
            still = {k: start[k] for k in self.frozen if k in r.params and k in start}
            if self.client_noise and r.client_id in self.exempt:  # its own device: it sends what it forged, unprivatised
                kept = {k: global_params[k] for k in r.params if k in global_params and k not in read}  # as an honest client's
                private.append(replace(r, params={**r.params, **kept, **still}))
                continue
            if self.per_layer:
                update, scaled = clip_per_layer({k: r.params[k] - start[k] for k in keys}, clip)
                clipped += scaled
            else:
                update, norm = clip_update({k: r.params[k] - start[k] for k in keys}, clip)
                clipped += norm > clip
            if w is not None and not self.client_noise:  # w_i <= 1: the weighted update stays within C
                update = {k: v * w[r.client_id] for k, v in update.items()}
            if self.client_noise:
                noise = gaussian_like(update, std, derive_seed(self.seed, "privacy", "client", round, r.client_id))
                share = {k: update[k] + noise[k] for k in keys}
            else:
                assert server_noise is not None
                share = {k: update[k] + server_noise[k] / n for k in keys}
            # local: an untrusted server gets no entry of its own that was not privatised; what it does not aggregate,
            # the client keeps (the global model's value stands in for it)
            sent = {**r.params, **{k: global_params[k] for k in r.params if k in global_params and k not in read}} if self.client_noise else r.params
            model = {**sent, **still, **{k: start[k] + share[k] * (n / denominator) for k in keys}}
            private.append(replace(r, params=model))
        weights = torch.full((n,), 1.0 / n, dtype=torch.float64) if n else torch.ones(1, dtype=torch.float64)
        if not n:  # nobody reported: the noise alone, w + z / (qW) (f_c: z / (q W_min)), as the base's one model of weight 1
            assert server_noise is not None, "client noise releases nothing without clients (aggregates_nobody)"
            private.append(ClientResult(NOBODY, {**global_params, **{k: global_params[k] + server_noise[k] / denominator for k in keys}}, 0, 0, 0.0, 1.0, 0.0))
        self._metrics = {"clipped": clipped / max(n, 1)}
        if self.adaptive is not None:
            gen = torch.Generator().manual_seed(derive_seed(self.seed, "privacy", "count", round))
            centred = (n - clipped) - n / 2  # sum_i (b_i - 1/2): sensitivity 1/2 per client, hence the 2 sigma_b below
            below = (centred + float(torch.randn((), generator=gen, dtype=torch.float64)) * self.adaptive.count_noise) / self.expected + 0.5
            self.clip_norm = self.adaptive.next_clip(clip, below, round)
            self._metrics["clip_norm"] = clip
        new = self.base.aggregate(global_params, private, round, weights=weights)
        clamped = {k: new[k].clamp(min=0) for k in self.nonnegative if k in new and new[k].is_floating_point()}
        return {**new, **clamped} if clamped else new

    def aggregates_nobody(self) -> bool:
        """Server noise releases a round nobody reported (:class:`~chillfl.aggregation.base.AggregatesNobody`): the noise
        alone on the fixed denominator, McMahan et al.'s Algorithm 1, so that the run is the sampled Gaussian mechanism the
        accountant bounds; client noise does not (the mean of no client's noised update is undefined: the round is skipped)."""
        return not self.client_noise

    def round_metrics(self) -> Mapping[str, Json]:
        return {**self.base.round_metrics(), **self._metrics}

    def state_dict(self) -> dict[str, Any]:
        return {"base": self.base.state_dict(), "clip_norm": self.clip_norm}  # adaptive clipping's C_t (a Python float: repr round-trips)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        check_state_keys(state, ("base", "clip_norm"), "PrivateAggregation")
        self.base.load_state_dict(state["base"])
        self.clip_norm = float(state["clip_norm"])


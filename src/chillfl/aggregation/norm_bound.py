"""Norm bounding, with optional weak DP (Sun, Kairouz, Suresh & McMahan, 2019, "Can You Really Backdoor Federated Learning?").

A backdoor or model-replacement attacker must move the global model far in one round, which takes an update
far larger than an honest one (``attack.kind = "scaling"``: w + gamma u). Norm bounding caps every client's
update before FedAvg's weighted mean, so no client moves the model by more than its weight times M. With the
round's global model w and client i's model w_i, update u_i = w_i - w, sample weight p_i = n_i / sum_j n_j::

    next model = w + sum_i p_i u_i / max(1, ||u_i|| / M)  [+ N(0, sigma^2 I)]

Honest updates below M pass unchanged (then it is FedAvg); a scaled one is shrunk back to norm M. The optional
Gaussian noise of std sigma on the aggregate is the paper's "weak differential privacy": small noise that
further dilutes a backdoor's direction, not a privacy guarantee (no accountant counts it; ``[privacy]`` is
chillfl's differential privacy).

Choices
-------
* ``norm = "global"`` (the default): ||u_i|| over every floating-point entry of the state as one vector
  (batch-norm statistics included): the paper's norm of "the update", and how TFF's research code for the
  paper measures a model delta (``tf.linalg.global_norm`` over all its tensors). ``"per_entry"`` clips each entry (a layer's weight,
  its bias, ...) to M on its own instead: a tighter bound on every layer, a looser one on the whole update
  (up to sqrt(entries) M).
* ``weighting = "samples"`` (FedAvg's n_i / n, the paper's weighted mean); ``"uniform"``: 1/|S|. With sample
  weights, a client that reports a large count gains weight; the clipping bounds its update, not its weight.
* The noise is added to the aggregated update (std ``sigma`` per coordinate of every floating-point entry,
  whatever the number of clients). TFF's research code instead adds N(0, sigma^2) to the clipped updates' *sum*
  and divides by the expected client count (``GaussianAverageQuery``), i.e. std sigma / m on the mean: set
  chillfl's ``sigma`` to that quotient to match it. ``sigma = 0`` (the default) adds nothing and draws nothing.
* The noise is drawn in float64 on the CPU from a ``torch.Generator`` seeded by
  ``derive_seed(seed, "norm_bound", round)`` (:func:`chillfl.clipping.gaussian_like`): the same under
  every executor and after a resume (no generator state in the checkpoint).
* ``max_norm`` has no default: it is in the units of one round's update, which grow with the local learning
  rate and steps. Choose it from the honest updates' norms (a training statistic, e.g. their median in clean
  rounds: the honest updates then pass about unclipped), never from test data. Below the honest norms it
  slows honest progress too; far above them it lets a scaled update through.
* Maths in float64; each entry is cast back to its dtype. Integer buffers take the max, as FedAvg.
* Round metric ``clipped``: the share of the round's clients whose update was clipped (``agg_clipped``).

Checked against (2026-12-01) the paper's ``u / max(1, ||u|| / M)`` on model differences (no sign convention:
clipping commutes with negation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import torch

from chillfl.aggregation.base import AggregatorBase, ClientResult, Json, Params, client_weights
from chillfl.aggregation.registry import AlgorithmSpec, BuildContext, instance_field, register_algorithm, run_value
from chillfl.aggregation.robust import ROBUST, float_keys, integer_max
from chillfl.options import Scale, require
from chillfl.clipping import clip_factor, gaussian_like, l2_norm
from chillfl.seeds import derive_seed, instance_seed


@dataclass(frozen=True)
class NormBoundOptions:
    """``max_norm``: the L2 bound M on a client's update (required, > 0); ``sigma``: std of the Gaussian noise on the
    aggregate (0: none); ``norm``: over the whole update or per entry; ``weighting``: FedAvg's sample weights or uniform."""

    max_norm: float | None = None
    sigma: Scale = 0.0
    norm: Literal["global", "per_entry"] = "global"
    weighting: Literal["samples", "uniform"] = "samples"

    def validate(self, section: str) -> None:
        require(self.max_norm is not None, f"{section}.max_norm",
                "is required: the L2 bound M on a client's update w_i - w, e.g. about the honest updates' median norm (a training statistic)")
        assert self.max_norm is not None
        require(self.max_norm > 0, f"{section}.max_norm", f"must be > 0, got {self.max_norm}")
        require(self.sigma >= 0, f"{section}.sigma", f"must be >= 0 (0: no noise), got {self.sigma}")


def bounded(update: Mapping[str, torch.Tensor], max_norm: float, norm: str) -> tuple[Params, bool]:
    """``update`` (float64) scaled to L2 norm at most M, over all entries together or each on its own; and whether it was clipped."""
    groups = [list(update)] if norm == "global" else [[k] for k in update]
    out: Params = {}
    clipped = False
    for keys in groups:
        size = l2_norm([update[k] for k in keys])
        clipped |= bool(size > max_norm)
        scale = clip_factor(size, max_norm).to(next(iter(update.values())).device) if keys else 1.0
        out.update({k: update[k] * scale for k in keys})
    return out, clipped


class NormBound(AggregatorBase):
    """FedAvg of the client updates, each clipped to L2 norm M first, plus optional Gaussian noise on the aggregate."""

    def __init__(self, seed: int | None, options: NormBoundOptions) -> None:
        """``seed``: the run's, which draws the aggregate's noise (None: the run's, which a run fills, :func:`_bind`; 0
        outside a run). Required, as before: ``options`` follows it and has no default."""
        assert options.max_norm is not None, "NormBoundOptions.validate refuses a missing max_norm"
        self.seed = seed
        self.options = options
        self.max_norm: float = options.max_norm
        self._clipped = 0.0

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        o = self.options
        keys = float_keys(results[0].params)
        w = {k: global_params[k].double() for k in keys}
        weights = client_weights(results, o.weighting).tolist()
        total = {k: torch.zeros_like(w[k]) for k in keys}
        clipped = 0
        for p, r in zip(weights, results):
            update, was = bounded({k: r.params[k].double() - w[k] for k in keys}, self.max_norm, o.norm)
            clipped += was
            for k in keys:
                total[k].add_(update[k], alpha=p)
        if o.sigma > 0:
            noise = gaussian_like(total, o.sigma, derive_seed(instance_seed(self.seed), "norm_bound", round))
            total = {k: total[k] + noise[k] for k in keys}
        self._clipped = clipped / len(results)
        out = {**integer_max(results), **{k: (w[k] + total[k]).to(results[0].params[k].dtype) for k in keys}}
        return {k: out[k] for k in results[0].params}

    def round_metrics(self) -> Mapping[str, Json]:
        """``clipped``: the share of this round's clients whose update was clipped (``agg_clipped`` in metrics.jsonl)."""
        return {"clipped": self._clipped}


def _bind(aggregator: NormBound, ctx: BuildContext) -> None:
    """An instance passed from Python draws its noise from the run's seed, as the builder's does: its ``seed`` the run's
    (None: filled), another refused on ``aggregator.seed`` (``NormBound(0, ...)`` noised every seed's run alike)."""
    aggregator.seed = run_value(aggregator.seed, ctx.seed, instance_field(ctx, "seed"), "seed")


SPEC = register_algorithm(
    "norm_bound",
    AlgorithmSpec(
        NormBoundOptions,
        lambda o, ctx: (NormBound(ctx.seed, o), []),
        "FedAvg of updates clipped to L2 norm M, optional weak-DP noise: bounds a backdoor (Sun et al. 2019)",
        capabilities=ROBUST,
        makes=(NormBound,),
        bind=_bind,
    ),
)

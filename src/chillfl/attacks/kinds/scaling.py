"""``scaling`` (model replacement, Bagdasaryan et al. 2020, Eq. 3): an attacker sends ``w + gamma * (w_i - w)``.

gamma = ``factor`` or, by default, the inverse of the attackers' share of the mean, so that their scaled updates
together replace it:

* ``weighting = "uniform"`` (default): n / m, the round's n clients over its m attackers: the paper's gamma = n / eta
  at the server lr eta = 1 of its FedAvg, which averages with 1/n each;
* ``weighting = "samples"``: N / N_A, the round's training rows over the attackers' rows: replacement under a mean
  weighted by rows (chillfl's FedAvg default, ``algorithm.weighting = "samples"``), where n / m under-scales an
  attacker with fewer rows than the round's average and over-scales one with more.

Checked against (2026-12-02) Bagdasaryan et al.'s code (ebagdasa/backdoor_federated_learning, ``training.py``:
``clip_rate = scale_weights / current_number_of_adversaries``, ``new = G + (X - G) * clip_rate`` on the model's
state; ``helper.py`` ``average_shrink_models``: ``eta / no_models``, a uniform mean): the same model-space formula,
with scale_weights = n / eta = n here; and vio1etus/FLPoison ``attackers/modelreplacement.py`` (``G + factor (X - G)``
under FedAvg, factor 50 = its clients / global lr). It is already in model space, so no gradient sign to read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from chillfl.attacks.spec import AttackSpec, ModelRound
from chillfl.options import require

if TYPE_CHECKING:
    from chillfl.aggregation.base import Params


@dataclass(frozen=True)
class ScalingOptions:
    """``factor``: the attacker sends ``w + factor (w_i - w)`` (0: the attackers' share of the mean inverted, read
    with ``weighting``: ``uniform`` n / m, clients over attackers; ``samples`` rows over the attackers' rows)."""

    factor: float = 0.0
    weighting: Literal["uniform", "samples"] = "uniform"

    def validate(self, section: str) -> None:
        require(math.isfinite(self.factor) and self.factor >= 0, f"{section}.factor", f"must be >= 0 (0: the kind's default), got {self.factor}")


def default_gamma(options: ScalingOptions, round: ModelRound) -> float:
    """1 / (the round's attackers' weight in a mean of every upload): n / m, or (all rows) / (the attackers' rows)."""
    bad = round.bad
    if options.weighting == "samples":
        rows = sum(r.num_samples for r in bad)
        if rows > 0:
            return sum(r.num_samples for r in round.results) / rows
    return len(round.results) / len(bad)


def forge_models(options: ScalingOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks import updates

    gamma = options.factor or default_gamma(options, round)
    return {r.client_id: updates.scaling(round.start(r.client_id), r.params, gamma) for r in round.bad}


SPEC = AttackSpec("scaling", ScalingOptions, summary="the attackers send their updates boosted (factor, or n / m: model replacement)", forge_models=forge_models)

"""``scaling`` (model replacement, Bagdasaryan et al. 2020, Eq. 3): an attacker sends ``w + gamma * (w_i - w)``.

gamma = ``factor`` or, by default, n / m (the round's n clients over its m attackers: their scaled updates
together replace the mean, as the paper's gamma = n / eta at the server lr eta = 1 of FedAvg).

Checked against (2026-12-01) Bagdasaryan et al.'s code (ebagdasa/backdoor_federated_learning, ``training.py``:
``clip_rate = scale_weights / current_number_of_adversaries``, ``new = G + (X - G) * clip_rate`` on the model's
state): the same model-space formula, with scale_weights = n / eta = n here. It is already in model space, so no
gradient sign to read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from chillfl.attacks.spec import AttackSpec, ModelRound
from chillfl.options import require

if TYPE_CHECKING:
    from chillfl.aggregation.base import Params


@dataclass(frozen=True)
class ScalingOptions:
    """``factor``: the attacker sends ``w + factor (w_i - w)`` (0: n / m, the round's clients over its attackers)."""

    factor: float = 0.0

    def validate(self, section: str) -> None:
        require(math.isfinite(self.factor) and self.factor >= 0, f"{section}.factor", f"must be >= 0 (0: the kind's default), got {self.factor}")


def forge_models(options: ScalingOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks import updates

    bad = round.bad
    gamma = options.factor or len(round.results) / len(bad)
    return {r.client_id: updates.scaling(round.global_params, r.params, gamma) for r in bad}


SPEC = AttackSpec("scaling", ScalingOptions, summary="the attackers send their updates boosted (factor, or n / m: model replacement)", forge_models=forge_models)

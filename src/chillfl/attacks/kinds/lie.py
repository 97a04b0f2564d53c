"""``lie`` ("A Little Is Enough", Baruch et al. 2019, Algorithm 3): every attacker sends the same ``mu - z * s``.

mu and s: the per-coordinate mean and (population) standard deviation of the round's *benign* models;
by default z = z_max from the round's n clients and m attackers (:func:`chillfl.attacks.updates.z_max`).
The attackers collude and see the benign models, the paper's threat model; with no benign client in
the round they use their own honest models.
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
class LieOptions:
    """``z``: the attackers send ``mean - z std`` of the round's benign models per coordinate (0: Baruch et al.'s z_max from n and m)."""

    z: float = 0.0

    def validate(self, section: str) -> None:
        require(math.isfinite(self.z) and self.z >= 0, f"{section}.z", f"must be >= 0 (0: z_max from n and m), got {self.z}")


def forge_models(options: LieOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks import updates

    bad = round.bad
    benign = [r.params for r in round.benign] or [r.params for r in bad]
    z = options.z or updates.z_max(len(round.results), len(bad))
    sent = updates.lie(benign, bad[0].params, z)
    keys = updates.float_keys(round.global_params)
    return {r.client_id: {**r.params, **{k: sent[k] for k in keys}} for r in bad}


SPEC = AttackSpec("lie", LieOptions, summary="the attackers all send mean - z std of the round's benign models (A Little Is Enough)", forge_models=forge_models)

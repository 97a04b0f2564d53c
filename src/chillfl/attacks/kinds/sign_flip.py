"""``sign_flip``: an attacker sends ``w - factor * (w_i - w)``, its update negated (and scaled): :func:`chillfl.attacks.updates.sign_flip`.

Sign convention (checked 2026-12-01): reference code negates the *gradient* g; an update here is
w_i - w = -lr g, so the negated gradient is the negated update, ``w - (w_i - w)``, the same attack.

Checked against (2026-12-02) vio1etus/FLPoison ``attackers/signflipping.py`` (``- self.update``: this, at factor 1).
Two variants differ: lishenghui/blades ``blades/adversaries/signflip_adversary.py`` negates every gradient *during*
local training (gradient ascent: the same as this after one local step only), and LPD-EPFL/byzfl
``byzfl/attacks/attacks.py`` ``SignFlipping`` sends minus the mean of the *honest* vectors (an omniscient attacker;
``ipm`` at epsilon 1 is that attack here).
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
class SignFlipOptions:
    """``factor``: the attacker sends ``w - factor (w_i - w)`` (0: 1, the negated update)."""

    factor: float = 0.0

    def validate(self, section: str) -> None:
        require(math.isfinite(self.factor) and self.factor >= 0, f"{section}.factor", f"must be >= 0 (0: the kind's default), got {self.factor}")


def forge_models(options: SignFlipOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks import updates

    return {r.client_id: updates.sign_flip(round.start(r.client_id), r.params, options.factor or 1.0) for r in round.bad}


SPEC = AttackSpec("sign_flip", SignFlipOptions, summary="the attackers send their updates negated (times factor)", forge_models=forge_models)

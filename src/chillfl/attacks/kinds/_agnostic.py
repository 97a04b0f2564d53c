"""What ``min_max`` and ``min_sum`` share (Shejwalkar & Houmansadr, NDSS 2021, the AGR-agnostic attacks): their
options and their forging, which differ by the condition only. Not a kind itself (a leading underscore)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

from chillfl.attacks.spec import ModelRound
from chillfl.options import require

if TYPE_CHECKING:
    from chillfl.aggregation.base import Params
    from chillfl.attacks.updates import Spread


@dataclass(frozen=True)
class AgnosticOptions:
    """``perturbation``: p in mu + gamma p on the updates (std: +std, the paper's -std of the gradients; unit: -mu/||mu||; sign: -sign(mu));
    ``gamma_init``, ``tol``: Algorithm 1's search."""

    perturbation: Literal["std", "unit", "sign"] = "std"
    gamma_init: float = 10.0
    tol: float = 1e-5

    def validate(self, section: str) -> None:
        require(math.isfinite(self.gamma_init) and self.gamma_init > 0, f"{section}.gamma_init", f"must be > 0, got {self.gamma_init}")
        require(math.isfinite(self.tol) and self.tol > 0, f"{section}.tol", f"must be > 0, got {self.tol}")


def forge(options: AgnosticOptions, round: ModelRound, condition: Callable[[Spread, float], bool]) -> dict[int, Params]:
    """Every attacker of the round sends ``w + mu + gamma p`` at the gamma Algorithm 1 finds for ``condition``.

    The reference updates: the benign ones; with fewer than 2 (one update has no spread to hide in, and its sample
    std is undefined), every honest update of the round, the attackers' own included; with fewer than 2 of those (a
    round of one client), nothing is forged and the attacker sends its honest model.
    """
    from chillfl.attacks import updates

    whose = round.benign if len(round.benign) >= 2 else round.results
    if len(whose) < 2:
        return {}
    keys = updates.float_keys(round.global_params)
    out = {}
    for start, bad in round.by_start(round.bad):  # one group under a method with one model; else the updates from each start
        sent, _ = updates.agnostic(start, round.onto(start, whose), bad[0].params, options.perturbation, condition, options.gamma_init, options.tol)
        out.update({r.client_id: {**r.params, **{k: sent[k] for k in keys}} for r in bad})
    return out

"""``min_sum`` (Shejwalkar & Houmansadr, NDSS 2021, "Manipulating the Byzantine", the AGR-agnostic Min-Sum attack):
every attacker sends ``w + mu + gamma * p``, gamma as large as keeps the forged update's summed squared distance to
the benign updates within any benign update's.

On the round's benign updates d_i = w_i - w: mu = mean_i d_i, p the perturbation (``perturbation``), and gamma
the largest value Algorithm 1 finds (:func:`chillfl.attacks.updates.gamma_search`) such that

    sum_i ||d_m - d_i||^2 <= max_i sum_j ||d_i - d_j||^2,    d_m = mu + gamma p

(:func:`chillfl.attacks.updates.min_sum_holds`; the right side is the paper's, a max over i, by default). The authors'
released code bounds by the *min* over i instead (``min_score = torch.min(scores)``), a tighter bound that forges a
smaller gamma: ``bound = "min"``. Every other choice is
``min_max``'s (:mod:`chillfl.attacks.kinds.min_max`): the sample std, the paper's search from ``gamma_init`` = 10
to ``tol`` = 1e-5, model differences as updates, colluding attackers who see the benign updates and, with fewer than
2 of them, use every honest update of the round (their own included), or send their honest models when the round has
one client.

Checked (2026-12) against: vrt1shjwlkr/NDSS21-Model-Poisoning ``cifar10/release-fedsgd-alexnet-mkrum.ipynb``
(``our_attack_score``: ``min_score = torch.min(scores)``, the forged update's summed squared distances compared
with it: ``bound = "min"``) and vio1etus/FLPoison ``attackers/min.py`` (``MinSum``: the bound is the max over the
benign updates of their summed squared distances, the paper's condition and the default here). No difference found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from chillfl.attacks.kinds._agnostic import AgnosticOptions, forge
from chillfl.attacks.spec import AttackSpec, ModelRound

if TYPE_CHECKING:
    from chillfl.aggregation.base import Params


@dataclass(frozen=True)
class MinSumOptions(AgnosticOptions):
    """``bound``: the right side's max over the benign updates (the paper's condition) or min (the authors' code)."""

    bound: Literal["max", "min"] = "max"


def forge_models(options: MinSumOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks.updates import Spread, min_sum_holds

    def holds(spread: Spread, gamma: float) -> bool:
        return min_sum_holds(spread, gamma, options.bound)

    return forge(options, round, holds)


SPEC = AttackSpec(
    "min_sum",
    MinSumOptions,
    summary="the attackers all send mu + gamma p, its summed squared distance to the benign updates within any benign one's (Min-Sum)",
    forge_models=forge_models,
)

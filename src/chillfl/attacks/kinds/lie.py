"""``lie`` ("A Little Is Enough", Baruch et al. 2019, Algorithm 3): every attacker sends the same ``mu + z * s``.

Checked against the authors' code (moranant/attacking_distributed_learning, ``malicious.py``: ``DriftAttack``
forges the gradient ``mean - z std``, the server steps ``w - lr g`` in ``server.py``) and against Blades' and
Karimireddy et al.'s ``AlieClient`` / ``ALittleIsEnoughAttack`` (gradients too, ``mu - std * z_max``). chillfl's
uploads are models: the update d = w_i - w is a reversed gradient, so that forged gradient is the model
``mean + z std`` (std is the same for models and updates). Until 2026-12-01 chillfl sent ``mean - z std``;
``sign = "minus"`` sends that mirror image (the convention of re-implementations that apply the gradient
formula to models directly, e.g. the decentralized ``ALittleIsEnoughAttack`` of epfml's code).

mu and s: the per-coordinate mean and (population) standard deviation of a reference set of models; by
default z = z_max from the round's n clients and m attackers (:func:`chillfl.attacks.updates.z_max`).

``z_among`` says over whom z_max reads its share of supporters. ``"clients"`` (the default) is Baruch et al.'s
Algorithm 3, z_max = max z with Phi(z) < (n - s) / n, s = floor(n/2 + 1) - m. ``"benign"`` is
Phi^-1((n - m - s) / (n - m)), the share among the benign clients, as Karimireddy et al.'s ``ALittleIsEnoughAttack``
and most re-implementations compute it (0 at n = 10, m = 2, where the paper's is 0.253). Both follow the round's
actual n and m, so a fixed ``z`` cannot stand in for either when clients drop out.

``reference`` says whose models: ``"benign"`` (the default) the round's benign models, an omniscient
attacker that sees every honest upload (Shejwalkar & Houmansadr's released notebooks with known benign
gradients, and most re-implementations); ``"own"`` the attackers' own honestly trained models, the
non-omniscient attacker Baruch et al. present (their abstract: "a novel non-omniscient attack"), which
estimates mu and s from the corrupted workers' data only (those notebooks' "unknown benign gradients"). With
``"benign"`` and no benign client in the round, the attackers use their own models. With ``"own"`` and
one attacker, s = 0 and it sends its honest model.
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
class LieOptions:
    """``z``: the attackers send ``mean + z std`` per coordinate (0: Baruch et al.'s z_max from n and m); ``reference``: of the
    round's benign models (omniscient) or of the attackers' own honest models (the paper's non-omniscient attacker);
    ``sign``: ``plus`` (the authors' forged gradient, read as a model) or ``minus`` (``mean - z std`` of the models);
    ``z_among``: z_max's share of supporters over the round's ``clients`` (the paper's (n - s) / n) or its ``benign``
    ones ((n - m - s) / (n - m), the common re-implementation)."""

    z: float = 0.0
    reference: Literal["benign", "own"] = "benign"
    sign: Literal["plus", "minus"] = "plus"
    z_among: Literal["clients", "benign"] = "clients"

    def validate(self, section: str) -> None:
        require(math.isfinite(self.z) and self.z >= 0, f"{section}.z", f"must be >= 0 (0: z_max from n and m), got {self.z}")


def forge_models(options: LieOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks import updates

    z = options.z or updates.z_max(len(round.results), len(round.bad), options.z_among)
    keys = updates.float_keys(round.global_params)
    whose = round.bad if options.reference == "own" else round.benign or round.bad
    out = {}
    for start, bad in round.by_start(round.bad):  # one group under a method with one model; else mean and std of the updates, from each start
        sent = updates.lie(round.onto(start, whose), bad[0].params, z if options.sign == "plus" else -z)
        out.update({r.client_id: {**r.params, **{k: sent[k] for k in keys}} for r in bad})
    return out


SPEC = AttackSpec("lie", LieOptions, summary="the attackers all send mean + z std of the round's benign (or their own) models (A Little Is Enough)", forge_models=forge_models)

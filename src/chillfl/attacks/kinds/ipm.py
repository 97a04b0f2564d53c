"""``ipm`` (inner product manipulation; Xie, Koyejo & Gupta, UAI 2019, "Fall of Empires"): every attacker sends
``w - epsilon * mean_j d_j``.

d_j = w_j - w: the round's *benign* updates (w the round's global model). The forged update is the benign mean
reversed and scaled by epsilon, so that the aggregate's inner product with the true mean goes negative
(:func:`chillfl.attacks.updates.ipm`). Choices where the paper leaves room:

* epsilon defaults to 0.1: a small reversed update that sits among the benign ones, the setting that beats
  selection rules such as Krum; a large epsilon (100, say) overwhelms averaging-like rules instead; set ``epsilon``
  for it. Source: not the paper, whose text was not reachable here (only its abstract, which gives no epsilon; read
  2026-12-01). 0.1 is FLPoison's ``IPM`` default (vio1etus/FLPoison ``attackers/ipm.py``, ``scaling_factor = 0.1``;
  its note: 0.1 breaks Krum, and 0.1 to 100 all break FedAvg and the geometric median), and Karimireddy, He & Jaggi's
  benchmark (ICML 2021; epfml/byzantine-robust-optimizer ``momentum-robustness/cifar10-all.py``, ``IPMAttack(epsilon=0.1)``
  with 11 of 25 workers Byzantine); Blades' ``IPMAdversary`` defaults to ``scale = 1.0``. Which epsilon the paper's
  experiments used is unchecked (its text still not reachable, 2026-12-03): docs/attacks.md says so.
* The paper's attackers send the reversed mean of the *gradients*; here the client uploads a model after local
  training, so the update is the model difference, the quantity an aggregator here sees.
* The attackers collude and see the benign updates, the paper's omniscient threat model (as ``lie``); with no benign
  client in the round they use the mean of their own honest updates.
* Every attacker sends the same model (the paper's identical Byzantine vectors); each keeps its own integer buffers.

Checked (2026-12) against: vio1etus/FLPoison ``attackers/ipm.py`` (``attack_vec = -scaling_factor * mean`` of the
benign updates, every attacker the same, default 0.1) and the paper's definition (PMLR 115, the Byzantine vector
-epsilon times the mean of the correct gradients, which on updates d = -lr g reads -epsilon times the mean benign
update). No difference found; the paper's own epsilon values were not reachable here.
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
class IpmOptions:
    """``epsilon``: the attackers send ``w - epsilon * mean`` of the benign updates (0.1, FLPoison's default: small, against Krum; large, e.g. 100: against averaging)."""

    epsilon: float = 0.1

    def validate(self, section: str) -> None:
        require(math.isfinite(self.epsilon) and self.epsilon > 0, f"{section}.epsilon", f"must be > 0, got {self.epsilon}")


def forge_models(options: IpmOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks import updates

    keys = updates.float_keys(round.global_params)
    out = {}
    for start, bad in round.by_start(round.bad):  # one group under a method with one model; else the updates from each start
        benign = round.onto(start, round.benign or round.bad)
        sent = updates.ipm(start, benign, bad[0].params, options.epsilon)
        out.update({r.client_id: {**r.params, **{k: sent[k] for k in keys}} for r in bad})
    return out


SPEC = AttackSpec(
    "ipm", IpmOptions, summary="the attackers all send w - epsilon * the benign updates' mean (inner product manipulation)", forge_models=forge_models
)

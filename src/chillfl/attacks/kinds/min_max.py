"""``min_max`` (Shejwalkar & Houmansadr, NDSS 2021, "Manipulating the Byzantine", the AGR-agnostic Min-Max attack):
every attacker sends ``w + mu + gamma * p``, gamma as large as keeps the forged update no farther from any benign
update than the two farthest benign updates are from each other.

On the round's benign updates d_i = w_i - w: mu = mean_i d_i, p the perturbation (``perturbation``), and gamma
the largest value Algorithm 1 finds (:func:`chillfl.attacks.updates.gamma_search`) such that

    max_i ||d_m - d_i|| <= max_{i,j} ||d_i - d_j||,    d_m = mu + gamma p

(:func:`chillfl.attacks.updates.min_max_holds`). Choices where the paper leaves room:

* ``std`` is the per-coordinate *sample* standard deviation (divided by k - 1), as torch.std computes it in the
  authors' released code (``lie`` uses the population one, as Baruch et al.). ``unit`` with mu = 0 is p = 0.
* The search is the paper's: from ``gamma_init`` (10, the paper's) halving its step until gamma moves by at most
  ``tol`` (1e-5); it cannot exceed 2 gamma_init, and a p of 0 (identical benign updates) sends mu whatever gamma.
* The update is the model difference after local training (the paper's gradients are the uploads of one step).
  An update reverses a gradient (d = -lr g after one step), so the paper's perturbations are read reversed:
  ``unit`` (-mu/||mu||) and ``sign`` (-sign(mu)) reverse with mu and read the same, but the paper's ``std``, -std of
  the gradients, is p = +std of the updates (:data:`chillfl.attacks.updates.PERTURBATIONS`). Until 2026-12-01
  chillfl took -std of the updates, the paper's forged update reversed coordinate by coordinate about mu.
* The attackers collude and see the benign updates (the paper's agnostic attacker with full knowledge of the benign
  updates). With fewer than 2 benign updates in the round (no spread to stay within; the sample std undefined), the
  reference is every honest update of the round, the attackers' own included; with fewer than 2 of those, the
  attacker sends its honest model. Every attacker sends the same model, keeping its own integer buffers.

Checked (2026-12) against: vrt1shjwlkr/NDSS21-Model-Poisoning (the authors' code)
``cifar10/release-fedsgd-alexnet-mkrum.ipynb`` and the other ``release-*.ipynb`` (``our_attack_dist``: deviation ``model_re / ||model_re||``,
``sign(model_re)`` or ``torch.std(all_updates, 0)``, forged ``model_re - lamda * deviation``, lamda from 10.0,
``lamda_fail`` halved each pass, ``threshold_diff = 1e-5``, squared distances against the largest benign pairwise
one; ``dev_type = 'std'`` in the release runs; the "unknown benign gradients" notebooks start lamda at
``threshold = 30``: ``gamma_init = 30`` there) and vio1etus/FLPoison ``attackers/min.py`` (the same search; its
``std`` is numpy's population std, its perturbation fixed to ``unit_vec``). No difference found.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chillfl.attacks.kinds._agnostic import AgnosticOptions, forge
from chillfl.attacks.spec import AttackSpec, ModelRound

if TYPE_CHECKING:
    from chillfl.aggregation.base import Params


def forge_models(options: AgnosticOptions, round: ModelRound) -> dict[int, Params]:
    from chillfl.attacks.updates import min_max_holds

    return forge(options, round, min_max_holds)


SPEC = AttackSpec(
    "min_max",
    AgnosticOptions,
    summary="the attackers all send mu + gamma p, no farther from any benign update than the benign ones are from each other (Min-Max)",
    forge_models=forge_models,
)

"""The server-side seam of model poisoning: the attackers' uploads rewritten, then the wrapped aggregator.

Every upload of a round is visible here, before aggregation: what ``lie`` needs (the benign models'
mean and spread), and where ``sign_flip``, ``scaling`` and ``gaussian`` are the same arithmetic the
attacker would do on its side (its honest model in, its malicious model out; the same bytes travel).
Computed in the driver, from the round's models and streams derived from (seed, round, client), so
every executor sends the aggregator the same models, and the wrapper keeps no state of its own: its
checkpoint is its base's, and a resumed run is bitwise the uninterrupted one.

It wraps whatever ``[algorithm]`` built (FedAvg, the robust rules ``median``, ``trimmed_mean``, ``krum``,
a ``[privacy]`` wrapper, which then clips the attackers' uploads as anyone's).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from chillfl.aggregation.base import Aggregator, AroundAggregator, ClientResult, Params
from chillfl.attacks import updates
from chillfl.seeds import derive_seed
from chillfl.settings.attack import UPDATE_KINDS, AttackConfig


def malicious(attack: AttackConfig, global_params: Params, results: Sequence[ClientResult], ids: frozenset[int], round: int, seed: int) -> list[ClientResult]:
    """The round's results with each attacker's model replaced by what it sends (module docstring), in the same order."""
    bad = [r for r in results if r.client_id in ids]
    if not bad or attack.kind not in UPDATE_KINDS:
        return list(results)
    n, m = len(results), len(bad)
    forged: dict[int, Params] = {}
    if attack.kind == "lie":
        benign = [r.params for r in results if r.client_id not in ids] or [r.params for r in bad]
        z = attack.z or updates.z_max(n, m)
        sent = updates.lie(benign, bad[0].params, z)
        forged = {r.client_id: {**r.params, **{k: sent[k] for k in updates.float_keys(global_params)}} for r in bad}
    for r in bad:
        if attack.kind == "sign_flip":
            forged[r.client_id] = updates.sign_flip(global_params, r.params, attack.factor or 1.0)
        elif attack.kind == "scaling":
            forged[r.client_id] = updates.scaling(global_params, r.params, attack.factor or n / m)
        elif attack.kind == "gaussian":
            forged[r.client_id] = updates.gaussian(global_params, r.params, attack.sigma, derive_seed(seed, "attack", "gaussian", round, r.client_id))
    return [dataclasses.replace(r, params=forged[r.client_id]) if r.client_id in forged else r for r in results]


class AttackedAggregation(AroundAggregator):
    """``base`` with the attackers' uploads rewritten before it aggregates (:func:`malicious`); everything else is the base's."""

    def __init__(self, base: Aggregator, attack: AttackConfig, ids: frozenset[int], seed: int) -> None:
        super().__init__(base)
        self.attack = attack
        self.ids = ids
        self.seed = seed

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        return self.base.aggregate(global_params, malicious(self.attack, global_params, results, self.ids, round, self.seed), round)

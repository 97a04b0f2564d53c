"""The server-side seam of model poisoning: the attackers' uploads rewritten, then the wrapped aggregator.

Every upload of a round is visible here, before aggregation: what an attack that needs the whole round
reads (``lie``: the benign models' mean and spread), and where one that rewrites an attacker's own
model does the same arithmetic the attacker would do on its side (its honest model in, its malicious
model out; the same bytes travel). The kind's :attr:`~chillfl.attacks.spec.AttackSpec.forge_models`
hook computes it in the driver, from the round's models and streams derived from (seed, round,
client), so every executor sends the aggregator the same models, and the wrapper keeps no state of its
own: its checkpoint is its base's, and a resumed run is bitwise the uninterrupted one. (It notes which forged uploads
its last ``aggregate`` left out, for the same round's record only: nothing a later round or a resume reads.)

An attacker's update is taken from the model it started from: the global model, or the one its downlink sent it
(``Downlink.params``: IFCA-style cluster models, pFedHN's generated ones, FedMut's mutations), which the wrapper reads
as the downlink passes through it (:class:`~chillfl.aggregation.base.SentStarts`).

It wraps whatever ``[algorithm]`` built (FedAvg, the robust rules ``median``, ``trimmed_mean``, ``krum``,
a ``[privacy]`` wrapper, which then clips the attackers' uploads as anyone's).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from chillfl.aggregation.base import AggregatesNobody, Aggregator, AroundAggregator, ClientResult, Downlink, Params, SentStarts
from chillfl.aggregation.uploads import finite_uploads
from chillfl.attacks.spec import ModelRound, as_mapping as _as_mapping, check_forged, spec_of
from chillfl.errors import ConfigError
from chillfl.settings.attack import AttackConfig

ModelForge = Callable[[Any, ModelRound], Mapping[int, Params]]
"""A kind's ``forge_models`` hook: (its options, the round) -> attacker id -> the model it sends."""


def forged(forge: ModelForge | None, options: Any, global_params: Params, results: Sequence[ClientResult], ids: frozenset[int], round: int, seed: int,
           starts: Mapping[int, Params] | None = None) -> list[ClientResult]:
    """The round's results with each attacker's model replaced by what ``forge`` says it sends, in the same order
    (no hook, or no attacker in the round: the results as they are). ``starts``: the clients sent a model of their own
    this round -> that model (:attr:`ModelRound.starts`)."""
    if forge is None or not any(r.client_id in ids for r in results):
        return list(results)
    sent = forge(options, ModelRound(global_params, results, ids, round, seed, dict(starts or {})))
    if not isinstance(sent, Mapping):  # a list's `client_id in sent` was False: every attacker sent its honest model, silently
        raise ConfigError("attack.kind", f"the attack's forge_models returned a {type(sent).__name__}, not a mapping of attacker id -> the model it sends")
    strangers = sorted((k for k in sent if k not in ids), key=repr)
    if strangers:  # a model for an honest client (or a str id) was dropped silently
        raise ConfigError("attack.kind", f"the attack's forge_models returned a model for {strangers[0]!r}, which is not an attacker "
                                         f"(attacker ids: {sorted(ids)}); return models for round.bad's client ids only")
    for r in results:
        if r.client_id in ids and r.client_id in sent:
            check_forged("forge_models", r.client_id, _as_mapping(sent[r.client_id], "forge_models", r.client_id), r.params)
    return [dataclasses.replace(r, params=sent[r.client_id]) if r.client_id in ids and r.client_id in sent else r for r in results]


def malicious(attack: AttackConfig, global_params: Params, results: Sequence[ClientResult], ids: frozenset[int], round: int, seed: int,
              starts: Mapping[int, Params] | None = None) -> list[ClientResult]:
    """The round's results with each attacker's model replaced by what ``[attack]``'s kind sends (module docstring), in the same order."""
    forge = spec_of(attack).forge_models if attack.enabled else None
    return forged(forge, attack.options, global_params, results, ids, round, seed, starts)


class AttackedAggregation(AroundAggregator):
    """``base`` with the attackers' uploads rewritten before it aggregates (:func:`malicious`); everything else is the base's."""

    def __init__(self, base: Aggregator, attack: AttackConfig, ids: frozenset[int], seed: int, tolerant: bool = False) -> None:
        super().__init__(base)
        self.tolerant = tolerant
        """The run's rule withstands bad clients (:func:`~chillfl.aggregation.registry.tolerates_bad_clients`): a forged
        non-finite upload is left out, not the end of the run."""
        self.attack = attack
        self.forge = spec_of(attack).forge_models  # looked up once: a plugin's entry point is not searched for every round
        self.ids = ids
        self.seed = seed
        self.sent = SentStarts()
        """What this round's downlinks told each client to start from: an update is w_i - start_i (:class:`ModelRound`)."""
        self.dropped: tuple[int, list[int]] = (-1, [])
        """(round, the clients whose forged upload the round's ``aggregate`` left out): :meth:`uploads_left_out`."""

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return self.sent.record(client_id, round, self.base.downlink(client_id, round, global_params))

    def reads_updates(self) -> bool:
        """The kinds forge from each attacker's update w_i - start_i (:class:`~chillfl.aggregation.base.ReadsUpdates`)."""
        return True

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int) -> Params:
        starts = self.sent.starts(round, global_params, results, self.base)
        sent = forged(self.forge, self.attack.options, global_params, results, self.ids, round, self.seed, starts)
        # checked as the server checks what arrives (it ran before the forging): a forged NaN names its client, and a rule
        # built to withstand bad clients leaves it out (a warning line, and the round's uploads_left_out: uploads_left_out)
        kept, dropped = finite_uploads(round, sent, self.tolerant)
        self.dropped = (round, dropped)
        return self.base.aggregate(global_params, kept, round)

    def uploads_left_out(self, round: int) -> list[int]:
        """The forged uploads this round's ``aggregate`` left out (:class:`~chillfl.aggregation.uploads.LeavesOutUploads`):
        the server lists them in the record's ``uploads_left_out`` beside those its own check left out."""
        done, dropped = self.dropped
        return list(dropped) if done == round else []

    def aggregates_nobody(self) -> bool:
        """The base's (:class:`~chillfl.aggregation.base.AggregatesNobody`): with nobody reporting there is no upload to forge."""
        return isinstance(self.base, AggregatesNobody) and self.base.aggregates_nobody()

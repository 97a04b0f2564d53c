"""What the run builder calls for ``[attack]``: the checks, the poisoned data, the attacked aggregator, the recording protocol.

Every check runs before anything is written; each mistake is one ConfigError naming the field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chillfl.attacks.poison import poisoned, trigger_of
from chillfl.attacks.select import attackers
from chillfl.errors import ConfigError
from chillfl.settings.attack import DATA_KINDS, UPDATE_KINDS

if TYPE_CHECKING:
    from chillfl.aggregation.base import Aggregator
    from chillfl.config import RunConfig
    from chillfl.data import FederatedData
    from chillfl.engine.protocol import ServerProtocol
    from chillfl.protocols.parts import Experiment

FIELD = "attack.kind"

WHY_NOT: dict[str, str] = {
    "softlabels": "its clients upload soft-labels on public inputs, not model updates",
    "prototypes": "its clients upload class prototypes, not model updates",
}
"""Why a protocol refuses the attacks on model updates (``sign_flip``, ``scaling``, ``lie``; its own ``gaussian`` noises what it uploads)."""


def check_attack(config: RunConfig) -> None:
    """Refuse an attack that makes no sense under the run's protocol (one line naming ``attack.kind``)."""
    kind = config.attack.kind
    if kind == "gaussian" and config.protocol in ("softlabels", "prototypes"):
        return  # the attackers' soft-label rows (chillfl.attacks.softlabels) or prototypes (chillfl.attacks.prototypes) are noised
    if kind in UPDATE_KINDS and config.protocol != "parameters":
        why = WHY_NOT.get(config.protocol, "it shares no model updates")
        allowed = ", ".join((*DATA_KINDS, "gaussian"))
        raise ConfigError(FIELD, f"{kind!r} rewrites a model update, and the {config.protocol} protocol has none ({why}); it takes {allowed}")


def attacker_ids(config: RunConfig, num_clients: int) -> frozenset[int]:
    """The run's attackers (empty when ``[attack]`` is off)."""
    return attackers(config.attack, num_clients, config.seed)


def poisoned_data(config: RunConfig, data: FederatedData) -> FederatedData:
    """``data`` with the attackers' training rows poisoned (``label_flip``, ``backdoor``), after the checks; else as it is."""
    if not config.attack.enabled:
        return data
    check_attack(config)
    return poisoned(data, config.attack, attacker_ids(config, data.num_clients), config.seed)


def attacked_aggregator(config: RunConfig, data: FederatedData, aggregator: Aggregator) -> Aggregator:
    """The aggregator wrapped so the attackers' uploads are rewritten before it aggregates (update attacks under parameter sharing only:
    prototype sharing's model aggregator, where models travel too, gets the honest models and its ``gaussian`` noises the prototypes)."""
    if config.attack.kind not in UPDATE_KINDS or config.protocol != "parameters":
        return aggregator
    from chillfl.attacks.aggregate import AttackedAggregation

    return AttackedAggregation(aggregator, config.attack, attacker_ids(config, data.num_clients), config.seed)


def with_attack(exp: Experiment, protocol: ServerProtocol) -> ServerProtocol:
    """The protocol, recording the round's attackers (and a backdoor's success) when ``[attack]`` is on."""
    attack = exp.config.attack
    if not attack.enabled:
        return protocol
    from chillfl.attacks.protocol import Attacked

    probe = None
    if attack.kind == "backdoor":
        x, y = exp.data.test()
        keep = y != attack.target
        probe = trigger_of(attack, exp.data).apply(x[keep]), y[keep].clone().fill_(attack.target)
    ids = attacker_ids(exp.config, exp.data.num_clients)
    client = protocol.client
    if attack.kind == "gaussian" and exp.config.protocol == "softlabels":
        import dataclasses

        from chillfl.attacks.softlabels import ForgedRows
        from chillfl.protocols.softlabels.client import SoftLabelClient

        assert isinstance(client, SoftLabelClient), "the soft-label protocol's client side"
        client = dataclasses.replace(client, privacy=ForgedRows(ids, attack.sigma, exp.config.seed, client.uses_logits, client.privacy))
    forge = None
    if attack.kind == "gaussian" and exp.config.protocol == "prototypes":
        from chillfl.attacks.prototypes import ForgedPrototypes

        forge = ForgedPrototypes(ids, attack.sigma, exp.config.seed)
    return Attacked(protocol, ids, exp.model, probe, exp.config.eval.batch_size, client, forge)

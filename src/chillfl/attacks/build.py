"""What the run builder calls for ``[attack]``: the checks, the poisoned data, the attacked aggregator, the recording protocol.

Every check runs before anything is written; each mistake is one ConfigError naming the field. Nothing
here knows an attack by name: it asks the kind's spec (:class:`chillfl.attacks.spec.AttackSpec`) which
hooks it has, and where it runs follows from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chillfl.attacks.poison import poisoned
from chillfl.attacks.select import attackers
from chillfl.attacks.spec import PARAMETERS, PROTOTYPES, SOFTLABELS, UPLOADS, AttackSpec, resolved, spec_of
from chillfl.errors import ConfigError
from chillfl.settings.attack import AttackConfig, kind_names

if TYPE_CHECKING:
    from chillfl.aggregation.base import Aggregator, Params
    from chillfl.config import RunConfig
    from chillfl.data import FederatedData
    from chillfl.engine.protocol import ServerProtocol
    from chillfl.protocols.parts import Experiment

FIELD = "attack.kind"


def kinds_under(protocol: str) -> list[str]:
    """The listed kinds (built-ins and entry points) that act under ``protocol`` (imports each one's module: for a refusal only)."""
    return [name for name in kind_names() if spec_of(AttackConfig(name)).runs_under(protocol)]


def refusal(spec: AttackSpec[object], protocol: str, name: str, method_models: str | None = None) -> str:
    """Why ``spec`` cannot run under ``protocol``, from its hooks: what it rewrites, what the protocol sends, what runs there instead.

    ``name``: the kind as the config wrote it (a plugin's import path or entry point), which the line names beside the
    kinds that run there: the spec's own ``name`` may be neither. ``method_models``: the run's method, where its clients
    upload their models beside what the protocol shares (a prototype method's, FedHKD's): those models travel, but no
    forging hook reaches them under that protocol, so the line says that rather than that there are none.
    """
    what = " or ".join(spec.rewrites().values())
    if method_models is not None and PARAMETERS in spec.rewrites():
        why = f"{UPLOADS.get(protocol, 'it shares none of them')}, and under {method_models} their models too, which reach the server honest: models are forged under the {PARAMETERS} protocol only"
        return f"{name!r} rewrites {what}, which the {protocol} protocol does not forge ({why}); attacks that run under {protocol}: {', '.join(kinds_under(protocol))}"
    why = UPLOADS.get(protocol, "it shares none of them")
    return f"{name!r} rewrites {what}, and the {protocol} protocol has none ({why}); attacks that run under {protocol}: {', '.join(kinds_under(protocol))}"


def data_attacks() -> list[str]:
    """The listed kinds that poison the attackers' training data (imports each one's module: for a refusal only)."""
    return [name for name in kind_names() if spec_of(AttackConfig(name)).poison is not None]


def sends_nothing(spec: AttackSpec[object], protocol: str, name: str, what: str, why: str) -> str:
    """Why an attack that only forges uploads cannot run where the clients upload nothing: it would change nothing, and the
    run would report an attack that never happened."""
    return (f"{name!r} rewrites {spec.rewrites()[protocol]}, and {what} uploads none ({why}): the attack would change nothing; "
            f"attacks that act there (on the attackers' training data): {', '.join(data_attacks())}")


def check_attack(config: RunConfig) -> None:
    """Refuse an attack that makes no sense in this run (one line naming the field): one with no hook for the run's
    protocol, or one its own ``check`` refuses.

    ``check`` is given the options its ``resolve`` fills in for the run's attackers, as every other hook is: a check
    that reads an option whose default the attackers decide (``dba``'s ``parts``) sees what the run will use, not None."""
    if not config.attack.enabled:
        return
    spec = spec_of(config.attack)
    if not spec.runs_under(config.protocol):
        protos = config.prototype_settings if config.protocol == PROTOTYPES else None
        raise ConfigError(FIELD, refusal(spec, config.protocol, config.attack.kind, f"prototypes.method {protos.method!r}" if protos is not None and protos.share_model else None))
    setup = config.distillation_setup
    if config.protocol == SOFTLABELS and spec.poison is None and setup is not None and not setup.spec.collaborative:
        raise ConfigError(FIELD, sends_nothing(spec, SOFTLABELS, config.attack.kind, f"distillation method {config.distillation.get('method')!r}", "no collaboration"))
    if spec.check is not None:
        spec.check(resolved(config.attack, attacker_ids(config, config.federation.num_clients)).options, config)


def attacker_ids(config: RunConfig, num_clients: int) -> frozenset[int]:
    """The run's attackers (empty when ``[attack]`` is off)."""
    return attackers(config.attack, num_clients, config.seed)


def poisoned_data(config: RunConfig, data: FederatedData) -> FederatedData:
    """``data`` with the attackers' training rows poisoned (the kind's ``poison`` hook), after the checks; else as it is."""
    if not config.attack.enabled:
        return data
    check_attack(config)
    return poisoned(data, config.attack, attacker_ids(config, data.num_clients), config.seed)


def forges_models(config: RunConfig) -> bool:
    """Whether the run's attackers rewrite the models they upload (a ``forge_models`` hook, under parameter sharing only:
    prototype sharing's model aggregator, where models travel too, gets the honest models)."""
    return config.attack.enabled and spec_of(config.attack).forge_models is not None and config.protocol == PARAMETERS


def forges_rows(config: RunConfig) -> bool:
    """Whether the run's attackers rewrite the soft-label rows they upload (a ``forge_rows`` hook, under soft-label sharing)."""
    return config.attack.enabled and spec_of(config.attack).forge_rows is not None and config.protocol == SOFTLABELS


def skipping_local_dp(config: RunConfig, data: FederatedData) -> frozenset[int]:
    """The attackers that send the models they forge without a client-side ``[privacy]`` step (``attack.local_dp = "skip"``):
    the run builder passes them to :func:`chillfl.privacy.build.private_aggregator`, which builds its wrapper with them
    exempt (local DP is client-side; a server-side mechanism still clips them). Empty otherwise."""
    if config.attack.local_dp != "skip" or not forges_models(config):
        return frozenset()
    return attacker_ids(config, data.num_clients)


def attacked_aggregator(config: RunConfig, data: FederatedData, aggregator: Aggregator, state: Params | None = None) -> Aggregator:
    """The aggregator wrapped so the attackers' uploads are rewritten before it aggregates (see :func:`forges_models`).

    The attack wrapper is outermost, so a ``[privacy]`` wrapper inside it clips (and, ``local``, noises) the forged
    uploads as anyone's; under ``local`` with ``attack.local_dp = "skip"`` that wrapper was built with the attackers
    exempt (:func:`skipping_local_dp`): nothing here changes it. ``state``: the run's initial model, whose entries the
    aggregator is asked whether it reads any (:func:`check_uploads`): built with the run, so a comparison refuses a
    variant before any of its runs is written."""
    if not forges_models(config):
        return aggregator
    if state is not None:
        check_uploads(config, aggregator, state)
    from chillfl.attacks.aggregate import AttackedAggregation

    ids = attacker_ids(config, data.num_clients)
    from chillfl.aggregation.registry import tolerates_bad_clients

    return AttackedAggregation(aggregator, resolved(config.attack, ids), ids, config.seed, tolerates_bad_clients(config.algorithm, aggregator))


def with_attack(exp: Experiment, protocol: ServerProtocol) -> ServerProtocol:
    """The protocol, recording the round's attackers (and the attack's success, where it has a probe) when ``[attack]`` is on;
    with the attackers' soft-label rows or prototypes forged where the kind has that hook and the run shares them."""
    if not exp.config.attack.enabled:
        return protocol
    from chillfl.attacks.protocol import Attacked

    ids = attacker_ids(exp.config, exp.data.num_clients)
    attack = resolved(exp.config.attack, ids)
    spec = spec_of(attack)
    probe = None if spec.probe is None else checked_probe(spec.probe(attack.options, exp.data))
    client = protocol.client
    if spec.forge_rows is not None and exp.config.protocol == SOFTLABELS:  # as forges_rows (spelt out: mypy narrows forge_rows)
        import dataclasses

        from chillfl.attacks.softlabels import ForgedRows
        from chillfl.protocols.softlabels.client import SoftLabelClient

        assert isinstance(client, SoftLabelClient), "the soft-label protocol's client side"
        client = dataclasses.replace(
            client, privacy=ForgedRows(ids, spec.forge_rows, attack.options, exp.config.seed, client.uses_logits, client.privacy, comply=attack.local_dp == "comply")
        )
    forge = None
    if spec.forge_prototypes is not None and exp.config.protocol == PROTOTYPES:
        from chillfl.attacks.prototypes import ForgedPrototypes

        forge = ForgedPrototypes(ids, spec.forge_prototypes, attack.options, exp.config.seed)
    return Attacked(protocol, ids, exp.model, probe, exp.config.eval.batch_size, client, forge)


def check_uploads(config: RunConfig, aggregator: Aggregator, state: Params) -> None:
    """Refuse, one line on ``attack.kind``, before anything is written (asked of the built aggregator): an attack that only
    forges models under an aggregator that reads no entry of them (its ``aggregated_keys`` empty: ``local_only``'s clients
    keep their whole model), where the forged models would go nowhere and the records would be the clean run's; and a
    forging attack under a method whose clients train from a start the server does not know
    (:attr:`~chillfl.capabilities.Capabilities.trains_from_own_start`, unless it reports it: ``ChoosesStart``), where
    the forged uploads would be other ones (found by the clients' start check, FedAMP stopped in round 2 with round 1 on
    disk); and a forging attack under a method whose returning clients start entries its server aggregates from their own
    values of them (:func:`~chillfl.aggregation.base.kept_entries` among its ``aggregated_keys``: a kept head or batch
    norm that the global model averages all the same), where each attacker's forged entries were read from the sent
    values, not the ones it trained from (the start check leaves kept entries alone: a ``[privacy]`` clip rightly reads
    them from the sent values, which its released average is taken from). A ``ChoosesStart`` report does not lift this
    one: it says which sent model a client started from, and the half puts its kept values in place of that model's. The
    refusal names the option that keeps those entries out of the average where the half declares one
    (:class:`~chillfl.aggregation.base.NamesKeepOption`)."""
    from chillfl.aggregation.base import ChoosesStart, aggregated_keys, innermost, keep_option, kept_entries
    from chillfl.aggregation.registry import run_capabilities

    if not forges_models(config):
        return
    spec = spec_of(config.attack)
    name = config.algorithm.get("name")
    if spec.poison is None and not aggregated_keys(aggregator, state):
        raise ConfigError(FIELD, sends_nothing(spec, PARAMETERS, config.attack.kind, f"algorithm {name!r}", "its server reads no entry of the clients' models"))
    own_start = run_capabilities(config.algorithm, aggregator).trains_from_own_start
    if own_start and not isinstance(innermost(aggregator), ChoosesStart):
        raise ConfigError(FIELD, f"{config.attack.kind!r} forges each attacker's upload from its update w - start, and algorithm {name!r} trains "
                                 f"from a start the server does not know ({own_start}): the forged uploads would be other ones; "
                                 "use a data-poisoning kind, or a method whose clients train from the model they are sent")
    half = aggregator.client_half()
    kept = kept_entries(half)
    own = [k for k in aggregated_keys(aggregator, state) if k in kept]
    if own:
        option = keep_option(half)
        lift = "a model without those entries (no batch norm, where they are its statistics) or a method that leaves them out of its average" if option is None \
            else f'set {options_table(config.algorithm)}.{option[0]} = "{option[1]}" (those entries left out of the average, kept by the clients alone)'
        raise ConfigError(FIELD, f"{config.attack.kind!r} forges each attacker's upload from its update w - start, and algorithm {name!r} averages "
                                 f"entries its returning clients train from their own kept values, not the sent ones (entry {own[0]!r}): the "
                                 f"forged uploads would be other ones; use a data-poisoning kind, or {lift}")


def options_table(table: Mapping[str, Any]) -> str:
    """The table the run's innermost algorithm reads its options from (``algorithm``, ``algorithm.base_options`` under a
    wrapper), where a refusal names one of them; ``algorithm`` for an instance passed from Python, whose name is no
    registered algorithm's."""
    from chillfl.aggregation.registry import declared_parts

    try:
        return declared_parts(table)[-1].section
    except ConfigError:
        return "algorithm"


def checked_probe(probe: object) -> tuple[Any, Any]:
    """A kind's probe when it is (inputs, labels) of one length; else one ConfigError on ``attack.kind`` (a plugin's
    slip would otherwise be a shape error from the first evaluation)."""
    import torch

    if not (isinstance(probe, tuple) and len(probe) == 2 and all(isinstance(t, torch.Tensor) for t in probe) and len(probe[0]) == len(probe[1])):
        got = f"{len(probe[0])} inputs and {len(probe[1])} labels" if isinstance(probe, tuple) and len(probe) == 2 and all(hasattr(t, "__len__") for t in probe) \
            else type(probe).__name__
        raise ConfigError(FIELD, f"the attack's probe must return (inputs, labels), two tensors of one length, got {got}")
    labels = probe[1]
    if labels.ndim != 1 or labels.dtype.is_floating_point or labels.dtype.is_complex or labels.dtype == torch.bool:
        raise ConfigError(FIELD, f"the attack's probe must return labels as a 1-d tensor of class ids (torch.long), got {tuple(labels.shape)} {labels.dtype}")
    return probe

"""What the run builder calls for ``[privacy]``: the plan (noise, sampling rates, checks), the wrapped aggregator, the DP-SGD step, the accounted protocol.

Every check runs before anything is written; each mistake is one ConfigError naming the field.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Sequence

from torch import nn

from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.extras import need
from chillfl.privacy.accounting import noise_for
from chillfl.privacy.dpsgd import PerSampleClipping
from chillfl.privacy.plan import PrivacyPlan
from chillfl.settings.privacy import PrivacyConfig
from chillfl.training.schedule import planned_steps

if TYPE_CHECKING:
    from chillfl.aggregation.base import Aggregator
    from chillfl.config import RunConfig
    from chillfl.data import FederatedData
    from chillfl.engine.protocol import ServerProtocol
    from chillfl.protocols.parts import Experiment

SECTION = "privacy"
FIELD = f"{SECTION}.mechanism"


def _client_sizes(data: FederatedData) -> tuple[int, ...]:
    return tuple(len(data.train_indices[c]) for c in range(data.num_clients))


def plan_privacy(config: RunConfig, data: FederatedData) -> PrivacyPlan | None:
    """The ``[privacy]`` plan of this run (None: off), or a ConfigError for a budget that is impossible here."""
    if not config.privacy.enabled:
        return None
    setup = config.distillation_setup
    if setup is not None and config.privacy.mechanism == "local":  # the soft-label method's own reports (Selective-FD's selection)
        from chillfl.protocols.softlabels.method import spec_of

        _refuse_reports("local", "the clients' soft-label rows", repr(setup.common.method), spec_of(setup).capabilities, "a method whose clients send only their rows")
    fed = config.federation
    return _plan(config.privacy, config.protocol, data.num_clients, fed.sample_size(), fed.rounds, config.client.batch_size, config.client.epochs, _client_sizes(data))


@functools.lru_cache(maxsize=16)
def _plan(p: PrivacyConfig, protocol: str, num_clients: int, per_round: int, rounds: int, batch_size: int, epochs: int, sizes: tuple[int, ...]) -> PrivacyPlan:
    need("opacus.accountants", "privacy", "[privacy]")  # up front: a missing extra is one line before anything is written
    if protocol == "softlabels" and p.mechanism != "local":
        raise ConfigError(FIELD, f"the soft-label protocol shares no model updates: its clients noise their uploaded rows with 'local', not {p.mechanism!r}")
    if protocol not in ("parameters", "softlabels"):
        raise ConfigError(FIELD, f"{p.mechanism!r} privatises model updates or local training; the {protocol} protocol is not covered yet")
    if p.mechanism in ("dp-fedavg",):
        if p.delta >= 1 / num_clients:
            raise ConfigError(f"{SECTION}.delta", f"must be < 1/num_clients = {1 / num_clients:.3g} (the privacy unit is a client), got {p.delta}")
        budgets = [(per_round / num_clients, rounds)]
    elif p.mechanism == "local":
        budgets = [(1.0, rounds)]  # a client's own noised update (soft-labels: each row) each round it takes part: no amplification
    else:  # dp-sgd: client k's steps over every round (worst case: it takes part in all of them), q_k = b / n_k
        largest = max(sizes)
        if p.delta >= 1 / largest:
            raise ConfigError(f"{SECTION}.delta", f"must be < 1/n = {1 / largest:.3g} (n: the largest client's {largest} samples, the privacy unit is a sample), got {p.delta}")
        budgets = sorted({(min(1.0, batch_size / n), rounds * planned_steps(n, batch_size, epochs)) for n in sizes if n})
    sigma = p.noise_multiplier
    if p.target_epsilon > 0:  # the accountant's sigma is per unit of sensitivity: the noise added is that many times larger
        try:
            sigma = p.sensitivity * max(noise_for(p.target_epsilon, p.delta, q, steps, p.accountant) for q, steps in budgets)
        except ValueError as exc:
            raise ConfigError(f"{SECTION}.target_epsilon", f"{p.target_epsilon} cannot be reached at delta = {p.delta} over the planned {rounds} rounds ({exc})") from None
    count_noise = 0.0
    if p.target_quantile > 0:
        if p.mechanism != "dp-fedavg":
            raise ConfigError(f"{SECTION}.target_quantile", f"adaptive clipping (Andrew et al. 2021) is dp-fedavg's; leave it 0 with {p.mechanism!r}")
        count_noise = p.count_noise or max(per_round / 20, sigma)
        if 2 * count_noise <= sigma:  # the update's share of the budget: sigma_u = (sigma^-2 - (2 sigma_b)^-2)^(-1/2) needs 2 sigma_b > sigma
            raise ConfigError(f"{SECTION}.count_noise", f"must be > noise_multiplier / 2 = {sigma / 2:.4g} (the count's noise takes part of the budget), got {count_noise}")
    return PrivacyPlan(p.mechanism, p.clip_norm, sigma, p.delta, p.accountant, per_round / num_clients, per_round, batch_size, epochs, protocol, p.row_norm,
                       p.target_quantile, p.clip_lr, count_noise, p.sensitivity)


def _capabilities(config: RunConfig, aggregator: Aggregator) -> Capabilities:
    """What the configured algorithm declares, with what the algorithm it wraps declares (a class passed from
    Python: its own ``capabilities`` attribute)."""
    from chillfl.aggregation.registry import algorithm_options, algorithm_spec, effective_capabilities

    name = str(config.algorithm.get("name"))
    try:
        spec = algorithm_spec(name, "algorithm")
    except ConfigError:
        declared = vars(type(aggregator)).get("capabilities")
        return declared if isinstance(declared, Capabilities) else Capabilities()
    options = algorithm_options(spec, name, {k: v for k, v in config.algorithm.items() if k != "name"}, "algorithm", "algorithm.name")
    return effective_capabilities(spec, options)


def _refuse_reports(
    mechanism: str, noised: str, method: str, capabilities: Capabilities, instead: str = "an algorithm whose clients send only their model"
) -> None:
    """A method whose clients send more than what ``mechanism`` noises (``reports``): that part is released without noise."""
    if capabilities.reports:
        raise ConfigError(FIELD, f"{mechanism!r} noises {noised}, but {method} also sends, without noise and outside epsilon, {capabilities.reports}; use {instead}")


MODELS = "what the clients' models reveal"
"""What ``dp-fedavg``, ``local`` and ``dp-sgd`` noise under the parameter protocol."""


def private_aggregator(config: RunConfig, data: FederatedData, aggregator: Aggregator) -> Aggregator:
    """``dp-fedavg`` / ``local``: the aggregator wrapped in :class:`~chillfl.privacy.aggregate.PrivateAggregation`; else as it is.

    The base must be a weighted mean (``takes_weights``) whose server maths reads nothing but the models
    (no ``plain_sgd`` normalisation by step counts, no control variates): anything else is refused.
    """
    plan = plan_privacy(config, data)
    if plan is None or plan.mechanism not in ("dp-fedavg", "local"):
        return aggregator
    name = config.algorithm.get("name")
    capabilities = _capabilities(config, aggregator)
    _refuse_reports(plan.mechanism, MODELS, f"algorithm {name!r}", capabilities)
    if not capabilities.takes_weights or capabilities.plain_sgd:
        why = capabilities.plain_sgd or "its aggregate() takes no client weights (declare takes_weights)"
        raise ConfigError(FIELD, f"{plan.mechanism!r} adds noise to a weighted mean of the clients' clipped updates, which algorithm {name!r} is not ({why})")
    from chillfl.privacy.aggregate import AdaptiveClip, PrivateAggregation

    base: Any = aggregator
    adaptive = AdaptiveClip(plan.target_quantile, plan.clip_lr, plan.count_noise) if plan.target_quantile > 0 else None
    return PrivateAggregation(base, local=plan.mechanism == "local", clip_norm=plan.clip_norm, noise_multiplier=plan.noise_multiplier, expected=plan.expected,
                              seed=config.seed, adaptive=adaptive)


def private_steps(config: RunConfig, data: FederatedData, model: nn.Module, aggregator: Aggregator | None) -> PerSampleClipping | None:
    """``dp-sgd``: the per-sample clipping step for the run's spec (None otherwise); refuses batch norm and personalising methods."""
    plan = plan_privacy(config, data)
    if plan is None or plan.mechanism != "dp-sgd":
        return None
    if aggregator is not None:
        _refuse_reports(plan.mechanism, MODELS, f"algorithm {config.algorithm.get('name')!r}", _capabilities(config, aggregator))
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        raise ConfigError(FIELD, f"'dp-sgd' clips per-sample gradients, and model {config.model.get('name')!r} has batch norm (a sample's gradient depends on its batch); use a model without it")
    from chillfl.aggregation.base import Personalising

    if aggregator is not None and isinstance(aggregator.client_half(), Personalising):
        raise ConfigError(FIELD, f"'dp-sgd' accounts one training a round per client, and algorithm {config.algorithm.get('name')!r} runs several")
    return PerSampleClipping(plan.clip_norm, plan.noise_multiplier)


def with_privacy(exp: Experiment, protocol: ServerProtocol) -> ServerProtocol:
    """The protocol, accounted (every round's ``epsilon``) when ``[privacy]`` is on."""
    plan = plan_privacy(exp.config, exp.data)
    if plan is None:
        return protocol
    from chillfl.privacy.protocol import Accounted

    return Accounted(protocol, plan, _client_sizes(exp.data), exp.config.seed)


__all__: Sequence[str] = ("PrivacyPlan", "plan_privacy", "private_aggregator", "private_steps", "with_privacy")

"""What the run builder calls for ``[privacy]``: the plan (noise, sampling rates, checks), the wrapped aggregator, the private local step, the accounted protocol.

Every check runs before anything is written; each mistake is one ConfigError naming the field. Nothing here
knows a mechanism by name: it asks the mechanism's spec (:class:`chillfl.privacy.spec.MechanismSpec`) what it
accounts and which hooks it has, and where it runs follows from them.

Checked against: pytorch/opacus 1.6 ``opacus/accountants/utils.py`` (``get_noise_multiplier``: the sigma of a
target, per unit of sensitivity, hence times ``sensitivity`` here; its ValueError "The privacy budget is too low"
becomes the ConfigError on ``privacy.target_epsilon``), 2026-12-02.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

import torch
from torch import nn

from chillfl.aggregation.base import AroundAggregator, ClientResult, Params, client_maker
from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.numeric import is_real
from chillfl.extras import need
from chillfl.models.common import variance_buffers
from chillfl.options import short_repr
from chillfl.plugins import missing_hooks
from chillfl.privacy.accounting import RDP_MAX_EPSILON, AccountantError, history_refusal, noise_for
from chillfl.privacy.dpsgd import PerSampleClipping, check_per_sample
from chillfl.privacy.plan import PrivacyPlan
from chillfl.privacy.spec import PARAMETERS, RELEASES, SOFTLABELS, Accounting, ExemptsClients, MechanismSpec, Noise, RunSizes, mechanism, rate_and_count, spec_of
from chillfl.settings.privacy import PrivacyConfig, PrivacyOptions, mechanism_names

if TYPE_CHECKING:
    from chillfl.privacy.accounting import Orders
    from chillfl.aggregation.base import Aggregator
    from chillfl.config import RunConfig
    from chillfl.data import FederatedData
    from chillfl.engine.protocol import ServerProtocol
    from chillfl.protocols.parts import Experiment
    from chillfl.training.local import PrivateGradients

SECTION = "privacy"
FIELD = f"{SECTION}.mechanism"

log = logging.getLogger(__name__)

DEFAULT_SIGMA = PrivacyOptions.noise_multiplier
"""``noise_multiplier``'s default: a value other than it (or 0) beside ``target_epsilon`` was written, and is not used."""


def _client_sizes(data: FederatedData) -> tuple[int, ...]:
    return tuple(len(data.train_indices[c]) for c in range(data.num_clients))


def _mechanisms_under(protocol: str) -> list[str]:
    """The listed mechanisms (built-ins and entry points) that act under ``protocol`` (imports each one's module: for a refusal only)."""
    return [name for name in mechanism_names() if mechanism(name).runs_under(protocol)]


def _mechanisms_where(test: Callable[[MechanismSpec[Any]], bool]) -> list[str]:
    """The listed mechanisms that act under parameter sharing and pass ``test``: the ones a refusal can point to
    instead (imports each one's module: for a refusal only)."""
    return [name for name in mechanism_names() if (spec := mechanism(name)).runs_under(PARAMETERS) and test(spec)]


def _hint(names: Sequence[str], what: str) -> str:
    """``, or a mechanism <what>: a, b`` (empty without one)."""
    return f", or a mechanism {what}: {', '.join(names)}" if names else ""


def refusal(spec: MechanismSpec[Any], protocol: str, name: str) -> str:
    """Why ``spec`` cannot run under ``protocol``, from its hooks: what it noises, what the protocol sends, what runs there instead.

    ``name``: the mechanism as the config wrote it (a plugin's import path or entry point), which the line names beside
    the mechanisms that run there: the spec's own ``name`` may be neither.
    """
    what = " or ".join(spec.covers().values())
    why = RELEASES.get(protocol, "it shares none of them")
    return f"{name!r} noises {what}, and the {protocol} protocol has none ({why}); mechanisms that run under {protocol}: {', '.join(_mechanisms_under(protocol)) or 'none yet'}"


def _reads_and_reports(mechanism: str, policy_name: Any, policy: Capabilities, settings: Sequence[str]) -> str:
    """The one line for a temperature policy that declares both ``reports`` and ``private_steps`` under a per-sample
    step. Why: each was refused alone, the reports first, whose advice (another normalisation) ran into the second, whose
    advice (a mechanism that noises the uploads) runs into the first again: only a policy reading no client's data runs,
    and ``settings`` (:func:`_settings_reading_nothing`) are this policy's own that make it read none."""
    return (f"{mechanism!r} clips and noises each sample's gradient, but temperature policy {policy_name!r} also sends, without noise and "
            f"outside epsilon, {policy.reports}; nor does clipping each sample's gradient bound what it reads from a client's data: "
            f"{policy.private_steps}; use a temperature policy that reads no client's data{_reading_none(settings)}")


def _reading_none(settings: Sequence[str]) -> str:
    """`` (this one reads none with a or b)`` for :func:`_settings_reading_nothing`'s finds (empty without one)."""
    return f" (this one reads none with {' or '.join(settings)})" if settings else ""


def _settings_reading_nothing(config: RunConfig) -> list[str]:
    """The single settings of the run's temperature policy under which it declares neither ``reports`` nor ``private_steps``
    (``temperature.KEY = false`` for an option on, ``= 0`` for a number that is not): its own declaration, asked again with
    each one changed, the table checked as a run's is. Why: the policy's name is no part of this module."""
    from chillfl.once import hushed
    from chillfl.temperature.registry import parse_policy, policy_capabilities

    _, options = parse_policy(config.temperature)
    if not dataclasses.is_dataclass(options):
        return []
    found = []
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if value is True:
            changed: Any = False
        elif is_real(value) and value != 0:
            changed = 0
        else:
            continue
        try:
            with hushed():  # its notes are of a table tried, not run
                other = policy_capabilities({**config.temperature, field.name: changed})
        except ConfigError:  # not a value this policy takes
            continue
        if not other.reports and not other.private_steps:
            found.append(f"temperature.{field.name} = {'false' if changed is False else changed}")
    return sorted(found, key=lambda setting: not setting.endswith("= false"))  # a switch off first: the plainest


def plan_privacy(config: RunConfig, data: FederatedData, tell: bool = False) -> PrivacyPlan | None:
    """The ``[privacy]`` plan of this run (None: off), or a ConfigError for a budget that is impossible here.

    ``tell``: say the sigma ``target_epsilon`` picked (:func:`say_sigma`), asked by one of a build's plans (its
    :func:`private_steps`, which every build calls), not in the cached plan: that was said by a process's first call alone."""
    p = config.privacy
    if not p.enabled:
        return None
    spec = spec_of(p)
    if not spec.runs_under(config.protocol):
        raise ConfigError(FIELD, refusal(spec, config.protocol, p.mechanism))
    setup = config.distillation_setup
    if setup is not None:  # the soft-label method's own reports (Selective-FD's selection)
        from chillfl.protocols.softlabels.method import spec_of as method_spec

        if not setup.spec.collaborative:  # its clients upload no row: the mechanism would privatise nothing, and report epsilon 0
            raise ConfigError(FIELD, f"{p.mechanism!r} privatises {spec.covers()[config.protocol]}, and distillation method {setup.common.method!r} "
                                     "uploads none (no collaboration): there is nothing to privatise; leave [privacy] off for it")
        _refuse_reports(p.mechanism, "the clients' soft-label rows", repr(setup.common.method), method_spec(setup).capabilities, "a method whose clients send only their rows")
    policy = _policy_capabilities(config)
    if policy.reports:  # read by the server from every client, whatever the mechanism noises
        name = config.temperature.get("policy")
        if policy.private_steps and spec.step is not None and config.protocol == PARAMETERS:  # both refusals, in one line
            raise ConfigError(FIELD, _reads_and_reports(p.mechanism, name, policy, _settings_reading_nothing(config)))
        _refuse_reports(p.mechanism, spec.covers().get(config.protocol, "the clients' uploads"), f"temperature policy {name!r}", policy,
                        "a temperature policy that reads no client's data on the server")
    if spec.check is not None:
        spec.check(p.options, config)
    if spec.approximation is not None:  # asked again under the comparison's table, after every run: a bad return is said now
        said = spec.approximation(p.options, config)
        if said is not None and not isinstance(said, str):
            raise ConfigError(FIELD, f"{p.mechanism!r}: its approximation hook must return a str (what its epsilon accounts as Poisson sampled) "
                                     f"or None, got {type(said).__name__}")
    fed = config.federation
    sizes = RunSizes(data.num_clients, fed.sample_size(), fed.rounds, config.client.batch_size, config.client.epochs, _client_sizes(data))
    try:
        hash(p)
    except TypeError:  # a user's options with a list or dict field: planned each time (the accountant's search is the cost)
        plan = _plan.__wrapped__(p, config.protocol, sizes, config.seed)
    else:
        plan = _plan(p, config.protocol, sizes, config.seed)
    if setup is not None and plan.protocol == SOFTLABELS:
        _probe_uploads(plan.delta, plan.accounted_sigma, setup.common.subset_size * fed.rounds, p.accountant, p.rdp_orders)
    if tell:
        say_sigma(p, plan, sizes.rounds)
    return plan


def say_sigma(p: PrivacyConfig, plan: PrivacyPlan, rounds: int) -> None:
    """One INFO line with the sigma ``target_epsilon`` picked: the resolved config keeps noise_multiplier as written, so
    this line is where the sigma that ran is said (nothing without a target)."""
    if p.target_epsilon > 0:
        unused = f", in place of the written noise_multiplier = {p.noise_multiplier:g}" if p.noise_multiplier not in (0.0, DEFAULT_SIGMA) else ""
        log.info("privacy.target_epsilon = %g at delta = %g over the planned %d rounds: noise_multiplier (sigma) = %.6g%s",
                 p.target_epsilon, p.delta, rounds, plan.noise_multiplier, unused)


@functools.lru_cache(maxsize=16)
def _probe_uploads(delta: float, sigma: float, releases: int, kind: str, orders: Orders) -> None:
    """``epsilon_upload``'s worst history (a client released every row of the round's subset every round, at q = 1) where
    the accountant cannot account it (:func:`~chillfl.privacy.accounting.history_refusal`): one line on ``privacy.accountant``,
    not a traceback after the round that reaches it (800 rows of sigma 0.5 took the PRV accountant 3.6e7 grid points)."""
    why = history_refusal(delta, sigma, 1.0, releases, kind, orders)
    if why is not None:
        instead = "use accountant = 'rdp', or fewer rows or a larger noise_multiplier" if kind == "prv" else "use fewer rows or a larger noise_multiplier"
        raise ConfigError(f"{SECTION}.accountant", f"epsilon_upload composes every soft-label row a client uploads (up to distillation.subset_size x rounds = {releases}), "
                                                   f"and {why}; {instead}")


@functools.lru_cache(maxsize=16)
def _plan(p: PrivacyConfig, protocol: str, sizes: RunSizes, seed: int) -> PrivacyPlan:
    need("opacus.accountants", "privacy", "[privacy]")  # up front: a missing extra is one line before anything is written
    spec = spec_of(p)
    accounting = spec.accounts(p.options, sizes)
    if not isinstance(accounting, Accounting):  # a plugin's hook: its slip is one line here, not an AttributeError
        raise ConfigError(FIELD, f"{p.mechanism!r}: its accounts hook must return a chillfl.extend.Accounting, got {type(accounting).__name__}")
    odd = next((s for s in accounting.steps if not (isinstance(s, tuple) and len(s) == 2 and rate_and_count(*s))), None) if accounting.steps else ()
    if odd is not None:  # a rate above 1 was accounted as given: an epsilon for a release that cannot happen, with no word
        raise ConfigError(FIELD, f"{p.mechanism!r}: its accounts hook's Accounting.steps must be (sampling rate q in (0, 1], compositions >= 0) "
                                 f"pairs, one at least, got {odd!r}")
    if p.delta >= accounting.delta_below:
        raise ConfigError(f"{SECTION}.delta", f"must be < {accounting.delta_why}, got {p.delta}")
    sensitivity = p.sensitivity
    sigma = p.noise_multiplier
    if p.target_epsilon > 0:  # the accountant's sigma is per unit of sensitivity: the noise added is that many times larger
        try:
            sigma = sensitivity * max(noise_for(p.target_epsilon, p.delta, q, steps, p.accountant, p.rdp_orders) for q, steps in accounting.steps)
        except AccountantError as exc:  # a target so large that its noise is too small for the PRV accountant to account
            raise ConfigError(f"{SECTION}.target_epsilon", f"{p.target_epsilon} at delta = {p.delta} over the planned {sizes.rounds} rounds: {exc}; "
                                                           "lower target_epsilon" + (", or use accountant = 'rdp'" if p.accountant != "rdp" and p.target_epsilon <= RDP_MAX_EPSILON else "")) from None
        except ValueError as exc:
            lower = ", or rdp_orders = 'extended' or accountant = 'prv' (lower floors)" if p.accountant == "rdp" and p.rdp_orders == "opacus" else ""
            raise ConfigError(f"{SECTION}.target_epsilon", f"{p.target_epsilon} cannot be reached at delta = {p.delta} over the planned {sizes.rounds} rounds ({_lowered(exc)}); "
                                                           f"raise target_epsilon or delta{lower}") from None
    _probe(p, sigma / sensitivity, accounting.steps)
    noise = Noise(p.clip_norm, sigma, sizes, seed)
    options = p.options if spec.settle is None else spec.settle(p.options, noise)
    return PrivacyPlan(p.mechanism, spec, options, noise, p.delta, p.accountant, protocol, sensitivity, p.rdp_orders)


def _probe(p: PrivacyConfig, sigma: float, steps: Sequence[tuple[float, int]]) -> None:
    """The accountant's epsilon of each unit's planned history (:func:`~chillfl.privacy.accounting.history_refusal`: its first
    step and its whole length), once, before anything is written: where it cannot be had (the PRV accountant's grid too
    large for memory, its discretisation failing at a small noise; a noise below
    :data:`~chillfl.privacy.accounting.RDP_MIN_SIGMA`) or is no finite bound, one ConfigError on the option that set the
    noise, not a traceback (or the kernel's OOM kill, or a loop without end) in a round, nor a run whose budget is
    unbounded (the RDP accountant's: every round's epsilon null, the run going on). The PRV accountant's lengths between
    are not probed (each a full accountant run), so a round's epsilon can still fail, and is refused there
    (:func:`chillfl.privacy.protocol.accounted_epsilon`); the RDP accountant's cannot (its RDP grows with the steps)."""
    field, instead = ("target_epsilon", "lower target_epsilon") if p.target_epsilon > 0 else ("noise_multiplier", "raise noise_multiplier")
    other = ", or use accountant = 'rdp'" if p.accountant == "prv" else ""
    for q, n in steps:
        why = history_refusal(p.delta, sigma, q, n, p.accountant, p.rdp_orders)
        if why is not None:
            raise ConfigError(f"{SECTION}.{field}", f"{why}; {instead}{other}")


def _policy_capabilities(config: RunConfig) -> Capabilities:
    """What the run's temperature policy declares (``reports``, ``private_steps``, as a method does); one passed from
    Python (``custom``) declares nothing here."""
    from chillfl.temperature.registry import is_custom, policy_capabilities

    if "policy" not in config.temperature or is_custom(config.temperature.get("policy")):
        return Capabilities()
    return policy_capabilities(config.temperature)


def _refuse_coupled_terms(config: RunConfig, mechanism: str) -> None:
    """An ``[objective]`` term that couples the samples of a batch (``TermSpec.couples_samples``) under a per-sample
    step: the step evaluates the loss one sample at a time, where the term is another one (FedDecorr's is 0), so the
    run dropped it without a word and reported it as trained with it."""
    from chillfl.training.terms import configured_terms

    for term in configured_terms(config.objective):
        if term.spec.couples_samples:
            raise ConfigError(term.field, f"{term.name!r} couples the samples of a batch ({term.spec.summary}), and {mechanism!r} takes each sample's "
                                          "gradient of the loss on that sample alone, where the term is not what it is on the batch: it would be "
                                          "dropped without a word; remove it from objective.terms with this [privacy] mechanism")


def _capabilities(config: RunConfig, aggregator: Aggregator) -> Capabilities:
    """What the configured algorithm declares, with what the algorithm it wraps declares (a class passed from
    Python: its own ``capabilities`` attribute)."""
    from chillfl.aggregation.registry import run_capabilities

    return run_capabilities(config.algorithm, aggregator)


def _lowered(exc: Exception) -> str:
    """An accountant's message as a clause inside the line: "The privacy budget is too low." read mid-sentence."""
    text = str(exc).rstrip(".")
    return text[:1].lower() + text[1:]


def _refuse_reports(mechanism: str, noised: str, method: str, capabilities: Capabilities, instead: str = "an algorithm whose clients send only their model") -> None:
    """A method whose clients send more than what ``mechanism`` noises (``reports``): that part is released without noise."""
    if capabilities.reports:
        raise ConfigError(FIELD, f"{mechanism!r} noises {noised}, but {method} also sends, without noise and outside epsilon, {capabilities.reports}; use {instead}")


MODELS = "what the clients' models reveal"
"""What a mechanism acting on the clients' updates or local steps noises under the parameter protocol."""


def private_aggregator(config: RunConfig, data: FederatedData, aggregator: Aggregator, exempt: frozenset[int] = frozenset(),
                       model: nn.Module | None = None) -> Aggregator:
    """The aggregator wrapped by the mechanism's ``aggregator`` hook, where it has one; else as it is.

    ``exempt``: the clients that skip a client-side mechanism (:func:`chillfl.attacks.build.skipping_local_dp`), handed to
    the hook in its :class:`~chillfl.privacy.spec.Noise`. ``model``: the run's model, whose variances (its norm layers'
    ``running_var``) the hook is handed as :attr:`~chillfl.privacy.spec.Noise.nonnegative`, to keep them at 0 or above.

    The base must be a weighted mean (``takes_weights``) whose server maths reads nothing but the models
    (no ``plain_sgd`` normalisation by step counts, no control variates): anything else is refused.
    """
    plan = plan_privacy(config, data)
    if plan is None or plan.spec.aggregator is None or config.protocol != PARAMETERS:
        return aggregator
    name = config.algorithm.get("name")
    capabilities = _capabilities(config, aggregator)
    _refuse_reports(plan.mechanism, MODELS, f"algorithm {name!r}", capabilities)
    base: Any = aggregator  # a weighted mean, as its capabilities declare
    if not capabilities.takes_weights or capabilities.plain_sgd:
        why = capabilities.plain_sgd or _unweighted(capabilities, aggregator, plan.spec.any_rule)
        if why is not None:
            instead = _hint(_mechanisms_where(lambda m: m.aggregator is None), "that leaves the aggregate alone")
            if plan.spec.any_rule:  # client noise (local) takes any rule over one shared model: the weighted mean is not what is missing
                raise ConfigError(FIELD, f"{plan.mechanism!r} clips and noises each client's update on the client and hands the privatised updates to "
                                         f"the server's rule over them (a weighted mean, a median, Krum, ...), which the server step of algorithm {name!r} is not ({why}); "
                                         f"use an algorithm whose server keeps one shared model (FedAvg, median, Krum, ...){instead}")
            # server noise (dp-fedavg): its hook noises the server's weighted mean of the models
            raise ConfigError(FIELD, f"{plan.mechanism!r} clips each client's update and hands the privatised updates to the server's weighted mean of the models, "
                                     f"which algorithm {name!r} is not ({why}); "
                                     f"use an algorithm whose server takes a weighted mean of the models{instead}")
        base = EqualWeights(aggregator)  # a client-side release (any_rule): the rule post-processes what is already private
    else:  # a weighted mean, handed the mechanism's weights: its own weighting is never read
        _refuse_unused_weighting(config, plan.mechanism)
    from chillfl.privacy.aggregate import PrivateAggregation

    noise = dataclasses.replace(plan.noise, exempt=frozenset(exempt), nonnegative=frozenset() if model is None else variance_buffers(model),
                                frozen=frozenset() if model is None else frozenset(n for n, p in model.named_parameters() if not p.requires_grad))
    private = plan.spec.aggregator(plan.options, noise, base)
    if private is base:  # nothing would be clipped or noised, and the run would report an epsilon for it
        raise ConfigError(FIELD, f"{plan.mechanism!r}: its aggregator hook returned the run's aggregator itself, which clips and noises nothing; "
                                 "wrap it (chillfl.extend.PrivateAggregation)")
    if missing_hooks(private, ("aggregate",)):  # a plugin's hook: one line, not an error inside the round loop (a proxy's hooks count)
        raise ConfigError(FIELD, f"{plan.mechanism!r}: its aggregator hook must return an aggregator (chillfl.extend.PrivateAggregation wraps the one it is given), "
                                 f"got {f'the class {private.__name__}, not an instance: call it' if isinstance(private, type) else type(private).__name__}")
    if exempt and isinstance(private, PrivateAggregation) and private.client_noise and private.exempt != noise.exempt:
        raise ConfigError(FIELD, f"{plan.mechanism!r}: its aggregator hook builds a client-side PrivateAggregation without exempt=noise.exempt, "
                                 "so the attackers set to skip the client-side step would comply without a word: pass it on")
    return private


def _refuse_unused_weighting(config: RunConfig, mechanism: str) -> None:
    """ConfigError on ``algorithm.weighting`` set off its default where the mechanism's aggregator hook hands the base's
    weighted mean its own weights (each privatised update at 1/n, scaled to the fixed denominator qW: uniform, or as its
    ``[privacy]`` options set them). Why: the option was recorded in ``config.toml`` and ignored, so a run folder said
    "samples" or "uniform" of a mean that was neither; the soft-label protocol refuses its unused options the same way.
    A rule that takes no weights (under a client-side mechanism: :class:`EqualWeights`) reads its own weighting and is
    not refused; nor is an aggregator passed from Python (no registered spec names its options)."""
    from chillfl.aggregation.registry import algorithm_options, algorithm_spec

    name = str(config.algorithm.get("name"))
    try:
        spec = algorithm_spec(name, "algorithm")
    except ConfigError:
        return
    if not dataclasses.is_dataclass(spec.options) or "weighting" not in {f.name for f in dataclasses.fields(spec.options)}:
        return
    options = algorithm_options(spec, name, {k: v for k, v in config.algorithm.items() if k != "name"}, "algorithm", "algorithm.name")
    value, default = dataclasses.asdict(options)["weighting"], dataclasses.asdict(spec.options())["weighting"]
    if value != default:
        raise ConfigError("algorithm.weighting", f"{mechanism!r} hands the server's weighted mean its own client weights (uniform, or as its [privacy] "
                                                 f"options set them), so this option of {name!r} would be ignored; leave it at its default {default!r}, got {value!r}")


def _unweighted(capabilities: Capabilities, aggregator: Aggregator, any_rule: bool) -> str | None:
    """Why a rule that declares no ``takes_weights`` cannot be wrapped by the mechanism (None: it can, the mechanism
    declaring ``any_rule`` and the rule being one shared model's server step: no ``not_a_base``, no ``personal_model``,
    no server-made client models)."""
    from chillfl.aggregation.registry import UNDECLARED_WEIGHTS, undeclared_weights

    own = capabilities.not_a_base or ("each client has a model of its own, which the privatised updates would not rebuild"
                                      if capabilities.personal_model or client_maker(aggregator) is not None else None)
    if any_rule:  # any rule over the updates will do: what is refused is a server step that is no such rule, said alone
        return own
    inherited = UNDECLARED_WEIGHTS if undeclared_weights(type(aggregator)) else ""
    return f"it declares no takes_weights: chillfl treats it as a rule that takes no external per-client weights{inherited}"


class EqualWeights(AroundAggregator):
    """A rule that takes no per-client weights, as the :class:`~chillfl.privacy.aggregate.WeightedMean` a client-side
    mechanism's hook (``any_rule``) wraps: equal weights are the rule itself (each privatised upload counts once, as
    ``PrivateAggregation``'s client noise weighs them); other weights, which the rule cannot honour, are refused."""

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        w = None if weights is None else torch.as_tensor(weights, dtype=torch.float64).reshape(-1)
        if w is not None and len(results) and (w.shape != (len(results),) or not torch.allclose(w, torch.full((len(results),), 1.0 / len(results), dtype=torch.float64))):
            raise ConfigError(FIELD, f"the mechanism's aggregator hook weighs the clients unequally ({short_repr(w.tolist())}), which the run's rule, "
                                     "declaring no takes_weights, cannot honour; pass equal weights or none")
        return self.base.aggregate(global_params, results, round)


def exempted(aggregator: Aggregator | None) -> frozenset[int]:
    """The clients a built client-side privacy wrapper lets send their uploads unreleased (its ``exempt``,
    :class:`~chillfl.privacy.spec.ExemptsClients`: attackers with ``attack.local_dp = "skip"``), found at the top or
    through the wrappers around it; empty when there is none (no mechanism, one that clips at the server, or none exempt)."""
    while aggregator is not None:
        if isinstance(aggregator, ExemptsClients):
            return frozenset(aggregator.exempt)
        aggregator = aggregator.base if isinstance(aggregator, AroundAggregator) else None
    return frozenset()


def private_steps(config: RunConfig, data: FederatedData, model: nn.Module, aggregator: Aggregator | None) -> PrivateGradients | None:
    """The mechanism's per-sample step (its ``step`` hook; None without one); refuses batch norm, and methods whose uploads one
    accounted training does not bound (their declared ``private_steps``, or a client half that runs its own trainings)."""
    plan = plan_privacy(config, data, tell=True)
    if plan is None or plan.spec.step is None or config.protocol != PARAMETERS:
        return None
    _refuse_coupled_terms(config, plan.mechanism)
    policy = _policy_capabilities(config).private_steps
    if policy:
        instead = _hint(_mechanisms_where(lambda m: m.step is None), "that noises the uploads instead")
        raise ConfigError(FIELD, f"{plan.mechanism!r} clips and noises each sample's gradient, which does not bound what temperature policy "
                                 f"{config.temperature.get('policy')!r} reads from a client's data: {policy}; use a temperature policy that reads "
                                 f"no training labels{_reading_none(_settings_reading_nothing(config))}{instead}")
    if aggregator is not None:
        name = config.algorithm.get("name")
        capabilities = _capabilities(config, aggregator)
        _refuse_reports(plan.mechanism, MODELS, f"algorithm {name!r}", capabilities)
        why = capabilities.private_steps or _undeclared_trainings(aggregator)
        if why:
            instead = _hint(_mechanisms_where(lambda m: m.step is None), "that noises the uploads instead")
            raise ConfigError(FIELD, f"{plan.mechanism!r} clips and noises the steps of one training a client a round, "
                                     f"which does not bound all that algorithm {name!r} uploads or reports from a client's data: {why}; "
                                     f"use an algorithm that trains once a round{instead}")
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        model_name = config.model.get("name")
        instead = _hint(_mechanisms_where(lambda m: m.step is None), "that noises the uploads instead")  # FedBN needs the batch norm
        raise ConfigError(FIELD, f"{plan.mechanism!r} clips per-sample gradients, and model {model_name!r} has batch norm (a sample's gradient depends on its batch); "
                                 f"use a model without it{instead}")
    step = plan.spec.step(plan.options, plan.noise)
    if isinstance(step, PerSampleClipping):  # a layer without a per-sample rule (nn.GRU) refused before the run, not mid-round
        check_per_sample(model, data.dataset.x_train[:2], data.dataset.y_train[:2], plan.mechanism)
    return step


def _undeclared_trainings(aggregator: Aggregator) -> str | None:
    """The safe side for a method that declares no ``private_steps``: a client half running its own trainings may run
    several a round, or read its data between them, and the accountant counts one."""
    from chillfl.aggregation.base import Personalising, half_parts

    if any(isinstance(part, Personalising) for part in half_parts(aggregator.client_half())):  # combined ones too
        return "its clients run their own trainings (a Personalising client half), which the accountant cannot count"
    return None


def with_privacy(exp: Experiment, protocol: ServerProtocol, unaccounted: frozenset[int] = frozenset()) -> ServerProtocol:
    """The protocol, accounted (every round's ``epsilon``) when ``[privacy]`` is on; ``unaccounted``: clients whose uploads
    skip the release (attackers with ``attack.local_dp = "skip"``), whose rounds are not charged."""
    plan = plan_privacy(exp.config, exp.data)
    if plan is None:
        return protocol
    from chillfl.privacy.protocol import Accounted

    return Accounted(protocol, plan, every_round=exp.config.federation.sampling == "poisson", unaccounted=unaccounted)


__all__: Sequence[str] = ("PrivacyPlan", "exempted", "plan_privacy", "private_aggregator", "private_steps", "with_privacy")

"""Algorithms by name: ``[algorithm] name = "..."`` -> (aggregator, local objective terms).

Every entry parses its own option table with :func:`chillfl.options.parse_options`,
so a typo in ``algorithm.mu`` fails at start-up with the allowed keys.
``pa3fed`` wraps another entry: ``{name = "pa3fed", base = "fedprox",
base_options = {mu = 0.01}, beta = 0.3}``.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Mapping

from torch import nn

from chillfl.aggregation.apfl import APFL, APFLOptions
from chillfl.aggregation.base import Aggregator, FedAvg
from chillfl.aggregation.ditto import Ditto, DittoOptions
from chillfl.aggregation.feddyn import FedDyn, FedDynOptions, feddyn_terms
from chillfl.aggregation.fedper import FedPer, FedPerOptions
from chillfl.aggregation.fedrep import FedRep, FedRepOptions
from chillfl.aggregation.fedbn import FedBN, FedBNOptions, batchnorm_keys
from chillfl.aggregation.fedgen import FedGen, FedGenOptions
from chillfl.aggregation.fedmut import FedMut, FedMutOptions
from chillfl.aggregation.fednova import FedNova, FedNovaOptions
from chillfl.aggregation.fedopt import FedOpt, FedOptOptions, ServerOptimizer
from chillfl.aggregation.fedprox import FedProx, FedProxOptions, ProximalTerm
from chillfl.aggregation.moon import Moon, MoonOptions
from chillfl.aggregation.pa3fed import PA3Fed, PA3FedOptions
from chillfl.aggregation.pfedme import PFedMe, PFedMeOptions
from chillfl.aggregation.robust import Krum, KrumOptions, Median, MedianOptions, TrimmedMean, TrimmedMeanOptions
from chillfl.aggregation.scaffold import LinearCorrectionTerm, Scaffold, ScaffoldOptions
from chillfl.aggregation.vrl_sgd import VRLSGD, VRLSGDOptions
from chillfl.errors import ConfigError, choice_error
from chillfl.options import parse_options
from chillfl.plugins import has_methods, plugin_names, resolve
from chillfl.training.fedalign import FedAlignOptions, FedAlignTerm
from chillfl.training.objective import Term

Built = tuple[Aggregator, list[Term]]


@dataclass(frozen=True)
class FedAvgOptions:
    """``weighting``: ``samples`` (m_i / m, McMahan et al.) or ``uniform`` (1/|S|, the FLex&Chill authors' code)."""

    weighting: Literal["samples", "uniform"] = "samples"


@dataclass(frozen=True)
class BuildContext:
    """What every builder may need besides its options."""

    num_clients: int
    model: nn.Module
    seed: int
    section: str = "algorithm"
    client_momentum: float | None = None
    """``client.momentum`` of the run (None: unknown, e.g. built outside a config)."""

    def param_keys(self) -> list[str]:
        return [name for name, _ in self.model.named_parameters()]


@dataclass(frozen=True)
class AlgorithmSpec:
    """An algorithm's option dataclass and how to build it."""

    options: type
    build: Callable[[Any, BuildContext], Built]
    summary: str
    figures: tuple[str, ...] = ()
    """The run figures the method's round metrics feed besides the common ones (``clp``: PA3Fed's critical periods)."""


def _fedopt(kind: ServerOptimizer) -> Callable[[Any, BuildContext], Built]:
    return lambda o, ctx: (FedOpt(kind, o, ctx.param_keys()), [])


ALGORITHMS: dict[str, AlgorithmSpec] = {
    "fedavg": AlgorithmSpec(FedAvgOptions, lambda o, ctx: (FedAvg(o.weighting), []), "FedAvg (McMahan et al. 2017)"),
    "fedprox": AlgorithmSpec(FedProxOptions, lambda o, ctx: (FedProx(o), [ProximalTerm()]), "FedAvg + proximal term (Li et al. 2020)"),
    "scaffold": AlgorithmSpec(
        ScaffoldOptions,
        lambda o, ctx: (Scaffold(ctx.num_clients, with_client_momentum(o, ctx, "SCAFFOLD's c_i"), ctx.param_keys()), [LinearCorrectionTerm()]),
        "control variates, option II (Karimireddy et al. 2020)",
    ),
    "fednova": AlgorithmSpec(FedNovaOptions, lambda o, ctx: _build_fednova(o, ctx), "normalised averaging (Wang et al. 2020)"),
    "fedadam": AlgorithmSpec(FedOptOptions, _fedopt("adam"), "server Adam (Reddi et al. 2021)"),
    "fedyogi": AlgorithmSpec(FedOptOptions, _fedopt("yogi"), "server Yogi (Reddi et al. 2021)"),
    "fedadagrad": AlgorithmSpec(FedOptOptions, _fedopt("adagrad"), "server Adagrad (Reddi et al. 2021)"),
    "fedbn": AlgorithmSpec(FedBNOptions, lambda o, ctx: (FedBN(batchnorm_keys(ctx.model), o), []), "local batch norm (Li et al. 2021)"),
    "vrl_sgd": AlgorithmSpec(
        VRLSGDOptions,
        lambda o, ctx: (VRLSGD(with_client_momentum(o, ctx, "VRL-SGD's Delta_i"), ctx.param_keys()), [LinearCorrectionTerm()]),
        "variance-reduced local SGD (Liang et al. 2019)",
    ),
    "fedmut": AlgorithmSpec(FedMutOptions, lambda o, ctx: (FedMut(ctx.seed, o, ctx.param_keys()), []), "stochastic mutation (Hu et al. 2024)"),
    "pa3fed": AlgorithmSpec(PA3FedOptions, lambda o, ctx: _build_pa3fed(o, ctx), "period-aware adaptive aggregation over a base (PA3Fed)", ("clp",)),
    "moon": AlgorithmSpec(MoonOptions, lambda o, ctx: _build_moon(o, ctx), "model-contrastive FL (Li et al. 2021)"),
    "fedalign": AlgorithmSpec(FedAlignOptions, lambda o, ctx: _build_fedalign(o, ctx), "FedAvg + final-stage Lipschitz alignment (Mendieta et al. 2022)"),
    "fedgen": AlgorithmSpec(FedGenOptions, lambda o, ctx: _build_fedgen(o, ctx), "server-trained feature generator as regulariser (Zhu et al. 2021)"),
    "median": AlgorithmSpec(MedianOptions, lambda o, ctx: (Median(), []), "coordinate-wise median, byzantine-robust (Yin et al. 2018)"),
    "trimmed_mean": AlgorithmSpec(TrimmedMeanOptions, lambda o, ctx: (TrimmedMean(o), []), "coordinate-wise trimmed mean, byzantine-robust (Yin et al. 2018)"),
    "krum": AlgorithmSpec(KrumOptions, lambda o, ctx: (Krum(o), []), "(Multi-)Krum, byzantine-robust (Blanchard et al. 2017)"),
    "ditto": AlgorithmSpec(DittoOptions, lambda o, ctx: (Ditto(o), []), "personal models regularised towards FedAvg's (Li et al. 2021)"),
    "fedper": AlgorithmSpec(FedPerOptions, lambda o, ctx: (FedPer(ctx.model, o), []), "shared base, local head (Arivazhagan et al. 2019)"),
    "fedrep": AlgorithmSpec(FedRepOptions, lambda o, ctx: (FedRep(ctx.model, o), []), "shared representation, local head trained first (Collins et al. 2021)"),
    "apfl": AlgorithmSpec(APFLOptions, lambda o, ctx: (APFL(ctx.model, o), []), "adaptive mixture of a local and the global model (Deng et al. 2020)"),
    "pfedme": AlgorithmSpec(PFedMeOptions, lambda o, ctx: (PFedMe(ctx.model, o), []), "Moreau-envelope personalisation (Dinh et al. 2020)"),
    "feddyn": AlgorithmSpec(
        FedDynOptions, lambda o, ctx: (FedDyn(ctx.num_clients, o, ctx.param_keys()), feddyn_terms()), "dynamic regularisation (Acar et al. 2021)"
    ),
}

UNWEIGHTED = ("median", "trimmed_mean", "krum")
"""Rules that take no client weights (robust aggregators): PA3Fed cannot pass them its coefficients."""
OWN_RULES = {
    "feddyn": "FedDyn's server step is its own (a uniform mean corrected by h), not a weighted average",
    "ditto": "Ditto's clients run their own local trainings, which PA3Fed's client half does not compose with",
    "fedrep": "FedRep's clients run their own local trainings, which PA3Fed's client half does not compose with",
    "apfl": "APFL's clients run their own local trainings, which PA3Fed's client half does not compose with",
    "pfedme": "pFedMe's clients run their own local trainings, which PA3Fed's client half does not compose with",
}
"""Built-ins PA3Fed cannot wrap, and why."""


def pa3fed_bases() -> list[str]:
    """The algorithms PA3Fed may wrap: weighted averages without client trainings of their own."""
    return [n for n in algorithm_names() if n != "pa3fed" and n not in UNWEIGHTED and n not in OWN_RULES]


def algorithm_names() -> list[str]:
    """Built-in names and those installed distributions register under ``chillfl.plugins`` (:mod:`chillfl.plugins`)."""
    return sorted({*ALGORITHMS, *plugin_names(lambda obj: isinstance(obj, AlgorithmSpec) or has_methods(obj, AGGREGATOR_METHODS))})


@dataclass(frozen=True)
class NoOptions:
    """A user's aggregator class without an ``Options`` dataclass takes no options."""


AGGREGATOR_METHODS = ("downlink", "aggregate", "round_metrics", "begin_round", "client_half", "state_dict", "load_state_dict")


def user_algorithm(obj: Any, name: str, field: str) -> AlgorithmSpec:
    """A user's object (import path or entry point) as an :class:`AlgorithmSpec`, or a ConfigError on ``field``.

    ``obj`` is an ``AlgorithmSpec`` (options, builder and summary: the built-ins' form), or an aggregator
    class: ``cls(options)`` when it declares an ``Options`` dataclass (its options are then parsed and
    validated like a built-in's), ``cls()`` otherwise; it adds no local objective terms.
    """
    if isinstance(obj, AlgorithmSpec):
        return obj
    if not isinstance(obj, type):
        raise ConfigError(field, f"{name!r} must name an aggregator class or an AlgorithmSpec, got {type(obj).__name__}")
    missing = [m for m in AGGREGATOR_METHODS if not callable(inspect.getattr_static(obj, m, None))]
    if missing:
        raise ConfigError(field, f"{name!r} is not an aggregator: it lacks {', '.join(missing)} (see chillfl.aggregation.base.Aggregator)")
    options = inspect.getattr_static(obj, "Options", None)  # a class attribute, looked up without running descriptors
    if options is None:
        return AlgorithmSpec(NoOptions, lambda o, ctx: (obj(), []), name)
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(field, f"{name!r}: its Options must be a dataclass, got {options!r}")
    return AlgorithmSpec(options, lambda o, ctx: (obj(o), []), name)


def with_client_momentum(options: Any, ctx: BuildContext, why: str) -> Any:
    """Fill ``options.momentum`` from ``client.momentum``; an explicit different value is a ConfigError.

    FedNova's a_i, SCAFFOLD's c_i and VRL-SGD's Delta_i all normalise a local
    displacement by the number of effective steps, which depends on the local
    optimiser's momentum (the upload does not carry it).
    """
    rho = ctx.client_momentum
    if options.momentum is not None and rho is not None and options.momentum != rho:
        raise ConfigError(
            f"{ctx.section}.momentum",
            f"must equal client.momentum = {rho} ({why} depends on the local optimiser), got {options.momentum}; leave it unset",
        )
    return options if options.momentum is not None else replace(options, momentum=rho or 0.0)


def _build_fednova(options: FedNovaOptions, ctx: BuildContext) -> Built:
    return FedNova(with_client_momentum(options, ctx, "FedNova's a_i"), ctx.param_keys()), []


def _require_head(ctx: BuildContext, method: str) -> str:
    """The model's classifier head name; a model without one is a ConfigError on ``model.name``."""
    from chillfl.models.parts import NoHeadError, head_name

    try:
        return head_name(ctx.model)
    except NoHeadError as exc:
        raise ConfigError("model.name", f"{method} works on the representation before the classifier head, and {exc}") from None


def _build_moon(options: MoonOptions, ctx: BuildContext) -> Built:
    from chillfl.training.moon import MoonTerm

    _require_head(ctx, "MOON")
    return Moon(options), [MoonTerm()]


def _build_fedalign(options: FedAlignOptions, ctx: BuildContext) -> Built:
    """FedAvg with FedAlign's term; the model must have a final stage that runs at reduced width."""
    from chillfl.models.parts import SlimStaged

    stage = ctx.model.slim_stage if isinstance(ctx.model, SlimStaged) else None
    if not isinstance(stage, str):
        raise ConfigError("model.name", "FedAlign needs a ResNet whose final stage runs at reduced width: resnet20, resnet32 or resnet18_fedchill")
    return FedAvg(), [FedAlignTerm(stage, options)]


def _build_fedgen(options: FedGenOptions, ctx: BuildContext) -> Built:
    from chillfl.training.fedgen import FedGenTerm

    head = _require_head(ctx, "FedGen")
    module = ctx.model.get_submodule(head)
    assert isinstance(module, nn.Linear)
    return FedGen(options, head, module.out_features, module.in_features, ctx.seed), [FedGenTerm(head)]


def _build_pa3fed(options: PA3FedOptions, ctx: BuildContext) -> Built:
    """PA3Fed around the ``base`` entry, which keeps its own local objective terms."""
    if options.base in UNWEIGHTED:
        raise ConfigError(f"{ctx.section}.base", f"{options.base} is a robust rule that takes no client weights, and PA3Fed's coefficients are weights; use a weighted base")
    if options.base in OWN_RULES:
        raise ConfigError(f"{ctx.section}.base", f"{OWN_RULES[options.base]}; use another base")
    bases = pa3fed_bases()
    if options.base not in bases:
        raise choice_error(f"{ctx.section}.base", options.base, bases)
    base, terms = make_aggregator(
        options.base,
        options.base_options,
        num_clients=ctx.num_clients,
        model=ctx.model,
        seed=ctx.seed,
        section=f"{ctx.section}.base_options",
        client_momentum=ctx.client_momentum,
    )
    return PA3Fed(base, options), terms


def algorithm_spec(name: str, section: str = "algorithm") -> AlgorithmSpec:
    """The registered (or a user's: ``"pkg.module:Name"``, a ``chillfl.plugins`` entry point) algorithm ``name``."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    found = resolve(name, f"{section}.name")
    if found is None:
        raise choice_error(f"{section}.name", name, algorithm_names())
    return user_algorithm(found, name, f"{section}.name")


def make_aggregator(
    name: str,
    options: Mapping[str, Any] | None,
    *,
    num_clients: int,
    model: nn.Module,
    seed: int,
    section: str = "algorithm",
    client_momentum: float | None = None,
) -> Built:
    """Build algorithm ``name`` from its option table; unknown names and options raise ConfigError.

    ``client_momentum`` is the run's ``client.momentum`` (FedNova needs it); None skips that check.
    """
    spec = algorithm_spec(name, section)
    parsed: Any = parse_options(spec.options, options, section)
    ctx = BuildContext(num_clients=num_clients, model=model, seed=seed, section=section, client_momentum=client_momentum)
    return spec.build(parsed, ctx)

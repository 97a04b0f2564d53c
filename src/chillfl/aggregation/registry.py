"""Algorithms by name: ``[algorithm] name = "..."`` -> (aggregator, local objective terms).

This module is the mechanism, not the catalogue. Each built-in's :class:`AlgorithmSpec`
lives in the method's own module and is named there with :func:`register_algorithm`
(``fedprox.py`` registers ``fedprox``); the modules of this package are imported on the
first lookup, so a new built-in needs no edit here. A user's aggregator comes in by import
path (``name = "pkg.mod:Rule"``) or a ``chillfl.plugins`` entry point, as an aggregator
class or an ``AlgorithmSpec``, and is turned into the same spec (:func:`user_algorithm`);
from then on nothing tells it from a built-in.

Every spec parses its own option table with :func:`chillfl.options.parse_options`, so a typo
in ``algorithm.mu`` fails at start-up with the allowed keys, and declares its
:class:`~chillfl.capabilities.Capabilities`, which the run builder and the Flower apps read
instead of names. A wrapper (PA3Fed) names the algorithm it wraps in one option
(:attr:`AlgorithmSpec.wraps`): ``{name = "pa3fed", base = "fedprox", base_options = {mu = 0.01}}``.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from dataclasses import dataclass, replace
from types import CodeType
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from torch import nn

from chillfl.aggregation.base import Aggregator, AroundAggregator, BuiltBySpec, holds_personal_model, needed_terms, with_needed_terms
from chillfl.capabilities import Capabilities, TakesName, declared
from chillfl.errors import ConfigError
from chillfl.models.parts import refuse_nonlinear_head
from chillfl.options import Chosen, parse_options, short_repr
from chillfl.plugins import (Call, Hook, Registry, check_constructor, check_hooks, check_spec_parts, has_methods, is_custom, look_up, missing_hooks,
                             plugin_names, refuse_bad_registration)
from chillfl.training.objective import Term
from chillfl.training.terms import ObjectiveTerm

if TYPE_CHECKING:  # annotations only
    from chillfl.config import RunConfig

Built = tuple[Aggregator, Sequence[Term]]
"""What a spec's builder returns: a Sequence, not a list, so a builder typed ``-> tuple[MyRule, list[LossTerm]]`` is one (a
list is invariant in its items); :func:`make_aggregator` returns the terms as a list."""


@dataclass(frozen=True)
class BuildContext:
    """What every builder may need besides its options."""

    num_clients: int
    model: nn.Module
    seed: int
    section: str = "algorithm"
    client_momentum: float | None = None
    """``client.momentum`` of the run (None: unknown, e.g. built outside a config)."""
    rounds: int | None = None
    """``federation.rounds`` of the run, for options given as a share of it (None: unknown, built outside a config)."""
    clients_per_round: int | None = None
    """Clients the run samples a round (``federation.sample_size()``), so that with ``num_clients`` and ``rounds`` a
    method knows how often a client takes part on average (None: unknown, built outside a config)."""
    client_sizes: tuple[int, ...] | None = None
    """Each client's number of training rows, by client id (``num_clients`` of them), for a method that scales by client
    size; the run fills it from its partition once the data are split (None: unknown, built outside a run; a ``--dry-run``
    without the data's files checks options only and builds nothing). A method that needs it refuses None
    (:func:`require_client_sizes`)."""
    objective_terms: tuple[ObjectiveTerm, ...] | None = None
    """The run's ``[objective]`` terms, parsed (None: unknown, built outside a config), for a server that normalises the
    local displacement by what shaped each local step (FedNova reads the proximal term's mu, as it reads the momentum)."""

    def param_keys(self) -> list[str]:
        return [name for name, _ in self.model.named_parameters()]

    def trainable_keys(self) -> list[str]:
        """The parameters local training updates: a frozen weight (``requires_grad = False``, :attr:`LocalSpec.frozen`)
        never moves, so a method's per-parameter state (a client's correction, server moments) would only be zeros."""
        return [name for name, p in self.model.named_parameters() if p.requires_grad]


def with_terms(aggregator: Aggregator) -> Built:
    """``aggregator`` with the local terms it declares it needs (:class:`~chillfl.aggregation.base.NeedsTerms`): how a
    spec's builder returns them, so that the config's method and the instance passed from Python read one list."""
    return aggregator, needed_terms(aggregator)


Check = Callable[[Any, "RunConfig", str], None]
"""``check(options, config, section)``: a ConfigError on a misfit of the parsed options with the run
(Krum's f against the clients a round samples); ``section`` is the table the options came from."""


def _no_check(options: Any, config: RunConfig, section: str) -> None:
    return None


@dataclass(frozen=True)
class AlgorithmSpec:
    """An algorithm's option dataclass, how to build it, and what it declares about itself."""

    options: type
    build: Callable[[Any, BuildContext], Built]
    summary: str
    figures: tuple[str, ...] = ()
    """The run figures the method's round metrics feed besides the common ones (``clp``: PA3Fed's critical periods)."""
    capabilities: Capabilities = Capabilities()
    """What the run builder, the Flower apps and wrappers may ask (see :mod:`chillfl.capabilities`)."""
    capabilities_of: Callable[[Any], Capabilities] | None = None
    """What it declares under its parsed options, where a variant declares otherwise (pFedHN-PC's clients keep a model
    of their own, pFedHN's none); None: ``capabilities`` under any options. Listings read ``capabilities``."""
    check: Check = _no_check
    """Its checks against the whole run config, before anything is built or written (also on ``--dry-run``)."""
    wraps: str | None = None
    """The option naming the algorithm this one wraps (PA3Fed: ``base``), whose options are the table
    ``<wraps>_options``; None: it wraps none. Generic code (the Flower apps, the resolved config) follows it."""
    tolerates: str | None = None
    """The integer option counting the byzantine clients of a round the rule is built to withstand (Krum's ``f``);
    None: it declares none. Below the attackers of ``[attack]`` (0, the default, defends against no one), the run says
    so in one note (:func:`chillfl.experiment.fewer_attackers_note`), suggesting a value the rule accepts."""
    makes: tuple[type, ...] = ()
    """The aggregator classes its builder makes (``krum``'s: ``(Krum,)``), so that an instance of one passed from Python
    (``chillfl.run(aggregator=Scaffold(3))``) is held to this spec's checks as the method a config names is
    (:func:`check_instance`). Matched by exact type: a subclass may change the maths, as capabilities are not inherited
    (:func:`declared_capabilities`); but :attr:`bind`, which fills what the run decides, binds a subclass no spec makes
    too (:func:`binder`). Declared next to the code, in the module that registers the spec. A class claimed by
    an earlier spec (a spec derived from a built-in with ``dataclasses.replace``, or one spec under a second name) stays
    that spec's for instances (:data:`_MADE`); the later one still builds it from a config."""

    bind: Callable[[Any, BuildContext], None] | None = None
    """``bind(aggregator, context)``, for an instance of :attr:`makes` passed from Python, on the run's copy of it before it
    is checked (:func:`bind_instance`): what the builder takes from the run (``context``: its clients, rounds, momentum,
    client sizes, ``[objective]`` terms) given to the instance where its constructor left it None, and a ConfigError where
    the instance's own value disagrees with the run's, as the config's builder refuses it (an option on
    ``<context.section>.<option>``, ``aggregator.options.momentum``; a constructor argument on :func:`instance_field`,
    ``aggregator.num_clients``). None: the instance takes nothing from the run. Why: ``Scaffold(3)`` in a run with
    ``client.momentum = 0.9`` ran with momentum 0, and ``Scaffold(5)`` in a 3-client run with the wrong |S| / N."""
    check_model: Callable[[Any, nn.Module], None] | None = None
    """``check_model(options, model)``: a ConfigError when the run's ``model`` lacks what the method needs under ``options``
    (MOON's classifier head, FedBN's batch norm), called before the builder (:func:`make_aggregator`) and for an instance
    passed from Python (:func:`check_instance`), so that both paths refuse alike. None: it needs nothing of the model."""
    withstands: Callable[[Any, int], int] | None = None
    """``withstands(options, clients)``: the byzantine clients of a round of ``clients`` the rule withstands under its
    parsed options, for a rule no integer option counts them for (:attr:`tolerates`): the trimmed mean's floor(beta n),
    the median's fewer than half. None: it declares none. Why: below the attackers of ``[attack]`` the run says so in
    the note :attr:`tolerates` gives (:func:`chillfl.experiment.fewer_attackers_note`), which such a rule went without."""
    withstanding: Callable[[Any, int, int], tuple[str, float] | None] | None = None
    """``withstanding(options, attackers, clients)``: the option, and the value to write for it, under which the rule
    withstands ``attackers`` of a round of ``clients`` (the trimmed mean's smallest beta that trims them), or None where
    no value it accepts does. The note suggests it. None (the median): no option changes what :attr:`withstands` counts."""
    takes_names: Mapping[str, TakesName] = dataclasses.field(default_factory=dict, hash=False)
    """Its options that take one of a registry's names (PA3Fed's ``base``: ``TakesName(weighted_bases, "algorithm",
    weighted_bases)``), by option: the configuration reference lists those names as the option's allowed values, a
    plugin's as a built-in's (:class:`~chillfl.capabilities.TakesName`). Empty: none."""

    def calls(self) -> list[Hook]:
        """Each hook the runtime calls: (field, the hook or None, the parameters it is called with), checked where the spec is read."""
        return [("build", self.build, ("options", "context")), ("check", self.check, ("options", "config", "section")),
                ("capabilities_of", self.capabilities_of, ("options",)), ("bind", self.bind, ("aggregator", "context")),
                ("check_model", self.check_model, ("options", "model")), ("withstands", self.withstands, ("options", "clients")),
                ("withstanding", self.withstanding, ("options", "attackers", "clients"))]

    def declared(self, options: Any) -> Capabilities:
        """What it declares under ``options`` (:attr:`capabilities_of`, else :attr:`capabilities`)."""
        return self.capabilities if self.capabilities_of is None else self.capabilities_of(options)


_REGISTRY: Registry[AlgorithmSpec] = Registry("algorithm", package="chillfl.aggregation")
"""The built-ins, each registered by its own module; a lookup imports the module of that name (:meth:`Registry.get`)."""


def register_algorithm(name: str, spec: AlgorithmSpec) -> AlgorithmSpec:
    """Name ``spec`` ``name`` in the registry: how each built-in module registers its spec, next to its code.

    Returns ``spec`` so that a module may keep it (``SPEC = register_algorithm("fedprox", AlgorithmSpec(...))``).
    A name registered twice from two modules is a programming error (two methods would answer to it); registered again
    from its own module (a cell re-run, a reloaded module), the new spec replaces the old, and the classes the old one
    made (:data:`_MADE`) are the new one's classes' claim instead.
    """
    refuse_bad_registration(name, spec, AlgorithmSpec, "register_algorithm")
    check_spec_parts(name, spec.options, spec.summary, "AlgorithmSpec", "algorithm.name")
    check_hooks(name, spec.calls(), "algorithm.name")  # registered by a plugin module: its hooks checked as a spec named by import path
    old = _REGISTRY.registered(name)
    registered = _REGISTRY.register(name, spec)
    dropped = []
    if old is not None and old is not spec:  # replaced: the old classes (a reloaded module's) no longer hold this name
        for cls in old.makes:
            if _MADE.get(cls) == name:
                del _MADE[cls]
                dropped.append(cls)
    for cls in spec.makes:  # the first spec to claim a class holds its instances (built_by); a later claim builds from configs only
        _MADE.setdefault(cls, name)
    for cls in (c for c in dropped if c not in _MADE):  # another spec that makes it (an alias) holds it now: built_by reads _MADE alone
        claim = next((n for n, s in registered_algorithms().items() if cls in s.makes), None)
        if claim is not None:
            _MADE[cls] = claim
    return registered


_MADE: dict[type, str] = {}
"""Each class in a registered spec's :attr:`AlgorithmSpec.makes`, with the name of the first spec registered to make it:
the one an instance passed from Python is held to (:func:`built_by`). Why not refuse a second claim: a plugin spec derived
from a built-in (``dataclasses.replace(scaffold.SPEC, options=...)``) or one spec under a second name inherits its
``makes``, and a plugin that failed to import was unusable from a config too. Complete for every class that exists: a
built-in's class is registered by the module that defines it (tests/test_builtmend_makers.py), so looking an instance's
class up here imports no module (a walk of every built-in module cost a plugin spec's run 0.3 s)."""


def registered_algorithms() -> dict[str, AlgorithmSpec]:
    """The built-ins' specs by name (a copy: the registry is changed through :func:`register_algorithm` only)."""
    return _REGISTRY.specs()


def __getattr__(name: str) -> Any:
    """``ALGORITHMS``: the built-ins' specs by name (read by the generated configuration reference)."""
    if name == "ALGORITHMS":
        return registered_algorithms()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def algorithm_names() -> list[str]:
    """Built-in names and those installed distributions register under ``chillfl.plugins`` (:mod:`chillfl.plugins`)."""
    return sorted({*registered_algorithms(), *plugin_names(is_algorithm, registered_algorithms(), "algorithm.name")})


def is_algorithm(obj: Any) -> bool:
    """Whether a plugin's object is an algorithm: an :class:`AlgorithmSpec` or an aggregator class."""
    return isinstance(obj, AlgorithmSpec) or has_methods(obj, AGGREGATOR_METHODS)


def weighted_bases(paths: Iterable[str] = ()) -> list[str]:
    """The algorithms a wrapper that reweights clients may wrap: they declare ``takes_weights`` and no ``not_a_base``;
    of ``paths`` (a user's import paths: ``chillfl list --options pkg.module:Name`` lists the one it names) too."""
    out = []
    for name in [*algorithm_names(), *paths]:
        try:
            caps = algorithm_spec(name).capabilities
        except ConfigError:  # an entry point whose spec cannot be read is no base (`chillfl list --options` says why); a built-in's is a bug
            if name in registered_algorithms():
                raise
            continue
        if caps.takes_weights and caps.not_a_base is None:
            out.append(name)
    return out




@dataclass(frozen=True)
class NoOptions:
    """A user's aggregator class without an ``Options`` dataclass takes no options."""


AGGREGATOR_METHODS = ("downlink", "aggregate", "round_metrics", "begin_round", "client_half", "state_dict", "load_state_dict")

AGGREGATOR_CALLS: tuple[Call, ...] = (
    ("aggregate", ("global_params", "results", "round")), ("downlink", ("client_id", "round", "global_params")),
    ("begin_round", ("round", "client_ids")), ("round_metrics", ()), ("client_half", ()), ("state_dict", ()), ("load_state_dict", ("state",)),
)
"""How the run calls each of :data:`AGGREGATOR_METHODS` (:func:`~chillfl.plugins.check_calls`, on the built aggregator)."""

HALF_CALLS: tuple[Call, ...] = (
    ("prepare", ("state", "start", "context")), ("finish", ("model", "state", "trained")), ("objectives", ("spec",)), ("train", ("local",)),
)
"""How every client calls its client half's hooks (``objectives`` and ``train``: a personalising half's, where it has them)."""


def declared_capabilities(cls: type, name: str, field: str) -> Capabilities:
    """A user's aggregator class's own ``capabilities`` attribute; without one, only the limits it inherits
    (:func:`inherited_limits`).

    Only the class's own attribute promises anything: a subclass of ``FedAvg`` or of another plugin's rule may change
    ``aggregate`` or its client half, so what the parent promised (``takes_weights``, ``personal_model``) is not promised
    for it. A subclass that keeps them says so: ``capabilities = Parent.capabilities``.
    """
    own = vars(cls).get("capabilities")
    return inherited_limits(cls) if own is None else declared(own, name, field)


def inherited_limits(cls: type) -> Capabilities:
    """The limits that guard correctness (``plain_sgd``, ``linear_head``) of the nearest class ``cls`` derives from that
    declares capabilities (a registered spec that makes it, :attr:`AlgorithmSpec.makes`, or its own ``capabilities``
    attribute); none when no such class declares them.

    Why: ``class MyScaffold(Scaffold): pass`` (to add a round metric) ran with Adam without a word, while ``Scaffold(3)``
    was refused: the subclass runs its parent's maths, whose assumption a forgotten declaration dropped. A limit only
    refuses: a run that broke one, accepted before, is refused now (a resumed one too); a subclass whose maths lifts it declares its own
    ``capabilities`` (``Capabilities()`` for none), which replace all of the parent's."""
    for parent in cls.__mro__[1:]:
        spec = _REGISTRY.get(_MADE[parent]) if parent in _MADE else None
        found = spec.capabilities if spec is not None else vars(parent).get("capabilities")
        if isinstance(found, Capabilities):
            return Capabilities(plain_sgd=found.plain_sgd, linear_head=found.linear_head)
    return Capabilities()


def user_algorithm(obj: Any, name: str, field: str) -> AlgorithmSpec:
    """A user's object (import path or entry point) as an :class:`AlgorithmSpec`, or a ConfigError on ``field``.

    ``obj`` is an ``AlgorithmSpec`` (options, builder, summary and capabilities: the built-ins' form), or an
    aggregator class: ``cls(options)`` when it declares an ``Options`` dataclass (its options are then parsed
    and validated like a built-in's), ``cls()`` otherwise; its local objective terms are those the instance declares
    it needs (:class:`~chillfl.aggregation.base.NeedsTerms`, none otherwise), and it declares its capabilities in its
    own class attribute ``capabilities`` (:func:`declared_capabilities`).
    """
    if isinstance(obj, AlgorithmSpec):
        declared(obj.capabilities, name, field)
        check_spec_parts(name, obj.options, obj.summary, "AlgorithmSpec", field)
        check_hooks(name, obj.calls(), field)
        return obj
    if not isinstance(obj, type):
        raise ConfigError(field, f"{name!r} must name an aggregator class or an AlgorithmSpec, got {type(obj).__name__}")
    missing = [m for m in AGGREGATOR_METHODS if not callable(inspect.getattr_static(obj, m, None))]
    if missing:
        raise ConfigError(field, f"{name!r} is not an aggregator: it lacks {', '.join(missing)} (see chillfl.extend.AggregatorBase)")
    capabilities = declared_capabilities(obj, name, field)
    options = inspect.getattr_static(obj, "Options", None)  # a class attribute, looked up without running descriptors
    if options is None:
        check_constructor(obj, False, name, field)
        refuse_unbound_run_values(obj, False, name, field, made_by(obj))
        return AlgorithmSpec(NoOptions, ClassBuilder(obj, False, name, field), name, capabilities=capabilities)
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(field, f"{name!r}: its Options must be a dataclass, got {options!r}")
    check_constructor(obj, True, name, field)
    refuse_unbound_run_values(obj, True, name, field, made_by(obj))
    return AlgorithmSpec(options, ClassBuilder(obj, True, name, field), name, capabilities=capabilities)


@dataclass(frozen=True)
class ClassBuilder:
    """The builder of an algorithm named by its aggregator class (an import path, an entry point: :func:`user_algorithm`):
    ``cls(options)`` (``cls()`` without an ``Options`` dataclass), then bound to the run (``ctx``) through the spec that
    makes it (:func:`bind_instance`), as an instance passed from Python is. Why: ``name = "pkg:Rule"`` for a rule whose
    registered spec fills its seed in ``bind`` ran with seed None (a TypeError at its first draw), while ``Rule()``
    passed from Python and the spec's own name ran; refusals name the config's ``<ctx.section>.<option>``. A class that
    names its spec per instance (``built_by``) is known only once built: one whose spec has no ``bind`` is refused here,
    on ``field``, as :func:`user_algorithm` refuses a class a registered spec without a ``bind`` makes. The type tells
    the run which algorithms are classes, held once built to their making spec's checks (:func:`check_named_classes`)."""

    cls: type
    with_options: bool
    name: str
    """How the config named it (``"pkg.mod:Rule"``), for refusals."""
    field: str
    """The key that named it (``algorithm.name``; a wrapped base's: ``algorithm.base``)."""

    def __call__(self, options: Any, ctx: BuildContext) -> Built:
        aggregator = self.cls(options) if self.with_options else self.cls()
        found = binder(aggregator, self.field) if found_maker(self.cls) else None  # none: nothing binds it (and no walk of every built-in module)
        if found is not None:
            name, spec, _ = found
            if spec.bind is None:
                refuse_unbound_run_values(self.cls, self.with_options, self.name, self.field, (name, spec))
            bind_instance(aggregator, ctx)
        return with_terms(aggregator)


def found_maker(cls: type) -> bool:
    """Whether a spec may build or bind instances of ``cls``: a registered spec lists it, or a class it derives from, in
    :attr:`AlgorithmSpec.makes` (:func:`made_ancestor`), or the class names its spec itself
    (:class:`~chillfl.aggregation.base.BuiltBySpec`)."""
    return made_ancestor(cls) is not None or callable(inspect.getattr_static(cls, "built_by", None))


def made_ancestor(cls: type) -> type | None:
    """``cls`` itself where a registered spec makes it (:data:`_MADE`), else the nearest class it derives from that one
    makes (along its method resolution order); None for none."""
    return next((c for c in cls.__mro__ if c in _MADE), None)


RUN_VALUES = tuple(f.name for f in dataclasses.fields(BuildContext) if f.name != "section")
"""What a builder is told of the run (:class:`BuildContext`), by the names a constructor would take them under."""


def made_by(cls: type) -> tuple[str, AlgorithmSpec] | None:
    """The registered spec that makes ``cls`` (:attr:`AlgorithmSpec.makes`, the first to claim it: :data:`_MADE`), by name;
    None when none does (a class that names its spec per instance, ``built_by``, is known only once built; a subclass of
    a class one makes is the user's own rule here, its None run values its own: only a base's bind fills them, :func:`binder`)."""
    maker = _MADE.get(cls)
    spec = None if maker is None else _REGISTRY.get(maker)
    return None if maker is None or spec is None else (maker, spec)


def refuse_unbound_run_values(cls: type, with_options: bool, name: str, field: str, maker: tuple[str, AlgorithmSpec] | None) -> None:
    """A ConfigError on ``field`` when ``cls``, named by import path, is made by ``maker`` (a registered spec's
    ``makes=``, or the spec an instance names by ``built_by``: (its name, it)) that has no ``bind``, and takes a run
    value in its constructor (:data:`RUN_VALUES`: ``seed=None``, ``rounds=None``): that spec's ``build`` passes the
    run's, but the class named by path is built as ``cls(options)`` alone and would run with None (a TypeError mid-run
    at its first draw); the spec's name runs it. A class no spec makes (``maker`` None) is the user's own, None and all
    (it may mean "unset" there): not refused."""
    if maker is None or maker[1].bind is not None:
        return
    maker_name = maker[0]
    try:
        signature = inspect.signature(cls)
        given = signature.bind(*((None,) if with_options else ())).arguments  # the options' parameter (check_constructor: it binds)
    except (TypeError, ValueError):  # no signature to read
        return
    unfilled = [p.name for p in signature.parameters.values() if p.name not in given and p.name in RUN_VALUES and p.default is None]
    if unfilled:
        raise ConfigError(field, f"{name!r} takes the run's {', '.join(unfilled)} in its constructor, which a class named by import path is "
                                 f"not given (it is built as {cls.__name__}({'options' if with_options else ''})); name its spec, {maker_name!r}, which "
                                 "builds it with them, or give that spec a bind that fills them (docs/extending.md)")


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


def require_client_sizes(ctx: BuildContext, field: str, why: str) -> tuple[int, ...]:
    """The clients' training-set sizes, or a ConfigError on ``field`` (an option that needs them, ``why``) when the
    aggregator is built outside a run (:attr:`BuildContext.client_sizes` is None)."""
    if ctx.client_sizes is None:
        raise ConfigError(field, f"{why}, which are known only in a run built from a config (make_aggregator(..., client_sizes=...) from Python)")
    return ctx.client_sizes


def require_head(ctx: BuildContext, method: str) -> str:
    """The model's classifier head name; a model without one is a ConfigError on ``model.name``."""
    return require_model_head(ctx.model, method)


def require_model_head(model: nn.Module, method: str) -> str:
    """:func:`require_head` of ``model``: for a spec's :attr:`AlgorithmSpec.check_model`, which an instance passed from
    Python meets too (a raw NoHeadError traceback otherwise)."""
    from chillfl.models.parts import NoHeadError, head_name

    try:
        return head_name(model)
    except NoHeadError as exc:
        raise ConfigError("model.name", f"{method} works on the representation before the classifier head, and {exc}") from None


def algorithm_spec(name: str, section: str = "algorithm", field: str | None = None) -> AlgorithmSpec:
    """The registered (or a user's: ``"pkg.module:Name"``, a ``chillfl.plugins`` entry point) algorithm ``name``.

    ``field`` names the key that chose it in errors (default ``<section>.name``; a wrapper's base: ``algorithm.base``).
    """
    try:
        spec: AlgorithmSpec = look_up(name, field or f"{section}.name", _REGISTRY.view(), is_algorithm, algorithm_names, user_algorithm)
    except ConfigError as exc:
        raise ConfigError(exc.field, _other_family(name) or exc.message) from None
    return spec


SHARED_OPTIONS = ("weighting",)
"""Options that mean the same in every method that takes them (``weighting``: clients weighted by their samples or
uniformly), so that a comparison across methods is confounded where they differ (:func:`dropped_choices`)."""


def dropped_choices(base: Mapping[str, Any], table: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(option, base's value, value run)`` for each of :data:`SHARED_OPTIONS` that ``base``, an ``[algorithm]`` table,
    sets and that ``table``, a variant's of another method, runs otherwise: the switch of ``algorithm.name`` started the
    variant's table afresh, so the new method took its own default. Custom or unknown methods: none (the run names
    an unknown one in its own line)."""
    old, new = base.get("name"), table.get("name")
    if old == new or not isinstance(new, str) or is_custom(new):
        return []
    try:
        defaults = {f.name: f.default for f in dataclasses.fields(algorithm_spec(new).options)}
    except ConfigError:
        return []
    return [(k, base[k], table.get(k, defaults[k])) for k in SHARED_OPTIONS
            if k in base and k in defaults and table.get(k, defaults[k]) != base[k]]


def _other_family(name: object) -> str | None:
    """Where ``name`` is registered when it is no algorithm: a prototype or soft-label method under ``[algorithm]``
    (docs/personalised.md lists FedGH beside the personalised algorithms) got a spelling hint (``fedgh``: "did you mean
    'pfedhn'?") or none. None: registered nowhere else."""
    from chillfl.settings.distillation import method_names as distillation_methods
    from chillfl.settings.prototypes import method_names as prototype_methods

    for section, names in (("prototypes", prototype_methods), ("distillation", distillation_methods)):
        if name in names():
            return f"{name!r} is a {section} method, not an algorithm: set {section}.method = {name!r}"
    return None


def algorithm_options(spec: AlgorithmSpec, name: str, options: Mapping[str, Any] | None, section: str = "algorithm", field: str | None = None) -> Any:
    """Algorithm ``spec``'s (named ``name`` by ``field``, default ``<section>.name``) options parsed from ``options``."""
    inner = None if spec.wraps is None else f"{spec.wraps}_options"
    return parse_options(spec.options, options, section, Chosen(field or f"{section}.name", name, registered_algorithms, inner))


def make_aggregator(
    name: str,
    options: Mapping[str, Any] | None,
    *,
    num_clients: int,
    model: nn.Module,
    seed: int,
    section: str = "algorithm",
    client_momentum: float | None = None,
    rounds: int | None = None,
    clients_per_round: int | None = None,
    client_sizes: Sequence[int] | None = None,
    objective_terms: Sequence[ObjectiveTerm] | None = None,
    field: str | None = None,
) -> tuple[Aggregator, list[Term]]:
    """Build algorithm ``name`` from its option table; unknown names and options raise ConfigError.

    ``client_momentum`` is the run's ``client.momentum`` (FedNova needs it); None skips that check.
    ``rounds`` is the run's ``federation.rounds`` (:attr:`BuildContext.rounds`) and ``clients_per_round`` the clients it
    samples a round (:attr:`BuildContext.clients_per_round`); None: unknown. ``client_sizes``: each client's training
    rows (:attr:`BuildContext.client_sizes`), ``num_clients`` of them; None: unknown. ``objective_terms``: the run's
    ``[objective]`` terms (:attr:`BuildContext.objective_terms`); None: unknown. ``field``: the key that named ``name``,
    for errors (default ``<section>.name``; a wrapped base's: ``algorithm.base``, :func:`build_base`).
    What the built aggregator's client half keeps must agree with its declared ``personal_model``, and a method
    that declares ``linear_head`` needs a model whose head is an ``nn.Linear`` (a ConfigError on ``model``).
    """
    spec = algorithm_spec(name, section, field)
    parsed: Any = algorithm_options(spec, name, options, section, field)
    sizes = None if client_sizes is None else tuple(int(n) for n in client_sizes)
    if sizes is not None and len(sizes) != num_clients:
        raise ValueError(f"client_sizes holds {len(sizes)} sizes for {num_clients} clients")
    ctx = BuildContext(num_clients=num_clients, model=model, seed=seed, section=section, client_momentum=client_momentum, rounds=rounds,
                       clients_per_round=clients_per_round, client_sizes=sizes, objective_terms=None if objective_terms is None else tuple(objective_terms))
    capabilities = effective_capabilities(spec, parsed, section)
    refuse_nonlinear_head(model, capabilities.linear_head, name)  # before its build reads the head
    if spec.check_model is not None:  # what it needs of the model, asked as for an instance passed from Python (check_instance)
        spec.check_model(parsed, model)
    built = spec.build(parsed, ctx)
    if not (isinstance(built, tuple) and len(built) == 2 and isinstance(built[1], (list, tuple))):  # a plugin's builder: its mistake is one line, not a TypeError
        raise ConfigError(f"{section}.name", f"{name!r}: its AlgorithmSpec's build must return (aggregator, [loss terms]), got {type(built).__name__}")
    if missing := missing_hooks(built[0], AGGREGATOR_METHODS):  # called every round: an int there was an AttributeError
        why = "a class, not an instance: call it" if isinstance(built[0], type) else f"not an aggregator: it lacks {', '.join(missing)}"
        raise ConfigError(field or f"{section}.name", f"{name!r}: its AlgorithmSpec's build returned {short_repr(built[0])} as the aggregator, which is "
                                                      f"{why} (see chillfl.extend.AggregatorBase)")
    if not isinstance(spec.build, ClassBuilder):  # a class named by path is bound by its ClassBuilder already
        # an instance of a class a registered spec binds (a builder's Scaffold(2), DnC(), a derived spec's DnC(None, o)):
        # bound to the run by that spec, on a copy, as one passed from Python is (DnC's seed None drew every run's
        # coordinates alike); checked in check_named_classes, once the run's config is at hand
        built = bound_to_run(spec, name, built, ctx, parsed, field or f"{section}.name")
    by_spec = instance_capabilities(built[0]) if isinstance(spec.build, ClassBuilder) else None  # a class: what its making spec declares, as for an instance
    check_declarations(capabilities if by_spec is None else by_spec, built[0], repr(name), field or f"{section}.name")
    # the terms its aggregator declares it needs, where the builder left them out (a plugin's): the instance passed from
    # Python gets them (with_needed_terms), so the config's method runs the same steps
    return built[0], with_needed_terms(built[0], built[1])


def build_base(options: Any, ctx: BuildContext, key: str = "base") -> tuple[Aggregator, list[Term]]:
    """The algorithm a wrapper wraps, built under the wrapper's run (``ctx``), as the run builds its own algorithm.

    ``options``: the wrapper's parsed options; ``key``: its :attr:`AlgorithmSpec.wraps` option, which names the base
    (``options.base``), whose option table is ``<key>_options``. Errors name those lines (``algorithm.base``,
    ``algorithm.base_options.mu``). Why public: a plugin wrapper (``AlgorithmSpec(wraps="base")``) builds its base
    through this rather than through the registry's internals; its limits are checked by the run (:func:`check_algorithm`).
    """
    return make_aggregator(
        str(getattr(options, key)), getattr(options, f"{key}_options"), num_clients=ctx.num_clients, model=ctx.model, seed=ctx.seed,
        section=f"{ctx.section}.{key}_options", client_momentum=ctx.client_momentum, rounds=ctx.rounds,
        clients_per_round=ctx.clients_per_round, client_sizes=ctx.client_sizes, objective_terms=ctx.objective_terms,
        field=f"{ctx.section}.{key}",
    )


def check_declarations(capabilities: Capabilities, aggregator: Aggregator, name: str, field: str) -> None:
    """A ConfigError on ``field`` when ``aggregator``'s client half and its declared ``personal_model`` disagree, or when
    it declares ``takes_weights`` and its ``aggregate()`` takes no ``weights=`` (a wrapper's call then failed mid-run).

    Why: ``checkpoint.client_models`` and the run's personal-model evaluation follow what the half implements
    (:class:`~chillfl.aggregation.base.HoldsPersonalModel`), the listings and docs what is declared; a rule named in a
    config and an instance passed from Python are held to the same agreement. ``name``: the method, as the line names it.
    """
    personal = capabilities.personal_model
    holds = holds_personal_model(aggregator.client_half())
    if personal != holds:
        said = "declares personal_model = True, but its client half implements no" if personal else "declares no personal_model, but its client half implements"
        raise ConfigError(field, f"{name} {said} HoldsPersonalModel (chillfl.extend); make the two agree")
    if capabilities.takes_weights and not takes_keyword(aggregator.aggregate, "weights"):  # a wrapper passes weights= (PA3Fed, [privacy]): a TypeError mid-run
        raise ConfigError(field, f"{name} declares takes_weights = True, but its aggregate() takes no weights= argument; add "
                                 "weights: torch.Tensor | None = None to it (the clients' weights, as the built-in averaging rule takes them), or drop takes_weights")


def takes_keyword(function: Callable[..., Any], name: str) -> bool:
    """Whether ``function`` accepts the keyword argument ``name`` (by name, or through ``**kwargs``)."""
    try:
        inspect.signature(function).bind_partial(**{name: None})
    except ValueError:  # no signature to read (a builtin): trust the declaration
        return True
    except TypeError:
        return False
    return True


UNDECLARED_WEIGHTS = "; its aggregate() does take weights=, but capabilities are not inherited: declare capabilities = Capabilities(takes_weights=True)"
"""What a refusal adds for a rule whose ``aggregate()`` takes ``weights=`` but which declares no ``takes_weights``
(:func:`undeclared_weights`): a subclass of a weighted rule declares its own capabilities."""


def undeclared_weights(rule: object) -> bool:
    """Whether ``rule`` (a class or an instance) has an ``aggregate()`` that takes ``weights=`` (then a missing
    ``takes_weights`` is an undeclared capability, not a rule that takes none)."""
    aggregate = getattr(rule, "aggregate", None)
    return callable(aggregate) and takes_keyword(aggregate, "weights")


@dataclass(frozen=True)
class Wrapped:
    """The algorithm a wrapper's options name (:attr:`AlgorithmSpec.wraps`): PA3Fed's ``base`` and ``base_options``."""

    field: str
    """The option that names it (``algorithm.base``)."""
    section: str
    """The table of its options (``algorithm.base_options``)."""
    name: str
    options: Mapping[str, Any]


def wrapped(spec: AlgorithmSpec, options: Any, section: str = "algorithm") -> Wrapped | None:
    """The algorithm ``spec`` wraps with its parsed ``options``; None when it wraps none."""
    if spec.wraps is None:
        return None
    key = spec.wraps
    return Wrapped(f"{section}.{key}", f"{section}.{key}_options", str(getattr(options, key)), getattr(options, f"{key}_options"))


def effective_capabilities(spec: AlgorithmSpec, options: Any, section: str = "algorithm") -> Capabilities:
    """What ``spec`` declares, completed by what the algorithm it wraps declares (a wrapper runs its base's maths and client half)."""
    inner = wrapped(spec, options, section)
    if inner is None:
        return spec.declared(options)
    base = algorithm_spec(inner.name, section, inner.field)
    base_options: Any = algorithm_options(base, inner.name, inner.options, inner.section, inner.field)
    return spec.declared(options).wrapping(effective_capabilities(base, base_options, inner.section))


def configured_capabilities(table: Mapping[str, Any]) -> Capabilities:
    """What the ``[algorithm]`` table's algorithm declares with its options, the algorithm it wraps included; ConfigError
    when its name is not registered (a class passed from Python: the caller asks the class)."""
    name = str(table.get("name"))
    spec = algorithm_spec(name, "algorithm")
    options = algorithm_options(spec, name, {k: v for k, v in table.items() if k != "name"}, "algorithm", "algorithm.name")
    return effective_capabilities(spec, options)


def refuse_unused_options(table: Mapping[str, Any], name: str, why: str) -> None:
    """ConfigError on an ``[algorithm]`` option (of algorithm ``name``) set off its default where no aggregator reads it (``why``).

    Such an option would be recorded in the result folder and ignored. Options equal to their defaults pass: a resolved
    ``config.toml`` writes every one of them.
    """
    cls: type = algorithm_spec(name).options
    written = dataclasses.asdict(parse_options(cls, {k: v for k, v in table.items() if k != "name"}, "algorithm"))
    defaults = dataclasses.asdict(cls())
    for key, default in defaults.items():
        value = written[key]
        if value != default:
            raise ConfigError(f"algorithm.{key}", f"{why}, so this option of {name!r} would be ignored; leave it at its default {default!r}, got {value!r}")


@dataclass(frozen=True)
class Part:
    """One algorithm of a (possibly wrapped) ``[algorithm]`` table, with what it declares under its options."""

    field: str
    """The key that named it (``algorithm.name``, ``algorithm.base``)."""
    section: str
    """The table of its options (``algorithm``, ``algorithm.base_options``)."""
    name: str
    spec: AlgorithmSpec
    declared: Capabilities
    """:meth:`AlgorithmSpec.declared` under its parsed options (FedPer's ``local_eval = "averaged"`` is off Flower)."""

    def limit_field(self) -> str:
        """The field a refusal by :attr:`declared`'s limits names: the option it is ``limited_by`` (in this part's table),
        else the key that named the part."""
        return self.field if self.declared.limited_by is None else f"{self.section}.{self.declared.limited_by}"


def declared_parts(table: Mapping[str, Any], section: str = "algorithm", field: str | None = None) -> list[Part]:
    """Each algorithm of ``table`` (itself, then every one it wraps), outermost first, with what it declares under the
    options the table gives it. Why: a limit that depends on an option (``capabilities_of``) holds for a base too, and
    a refusal names the line that set it (:meth:`Part.limit_field`)."""
    field = field or f"{section}.name"
    name = str(table.get("name"))
    spec = algorithm_spec(name, section, field)
    options: Any = algorithm_options(spec, name, {k: v for k, v in table.items() if k != "name"}, section, field)
    part = Part(field, section, name, spec, spec.declared(options))
    inner = wrapped(spec, options, section)
    if inner is None:
        return [part]
    return [part, *declared_parts({**inner.options, "name": inner.name}, inner.section, inner.field)]


def algorithm_parts(table: Mapping[str, Any], section: str = "algorithm", field: str | None = None) -> list[tuple[str, str, AlgorithmSpec]]:
    """(name field, name, spec) of the algorithm ``table`` names and of every one it wraps, outermost first.

    How generic code (the Flower apps) asks each part of a wrapped method, naming the field that chose it
    (``algorithm.name``, then ``algorithm.base``).
    """
    field = field or f"{section}.name"
    name = str(table.get("name"))
    spec = algorithm_spec(name, section, field)
    options: Any = algorithm_options(spec, name, {k: v for k, v in table.items() if k != "name"}, section, field)
    inner = wrapped(spec, options, section)
    if inner is None:
        return [(field, name, spec)]
    return [(field, name, spec), *algorithm_parts({**inner.options, "name": inner.name}, inner.section, inner.field)]


def half_field(table: Mapping[str, Any], section: str = "algorithm", field: str | None = None) -> tuple[str, str]:
    """The field that names the algorithm whose client half the run's clients run, and its name: ``algorithm.name`` for
    one that wraps none, else the wrapped base's (``algorithm.base`` under PA3Fed), innermost. Why: a wrapper runs its
    base's client half (its own part only adds to it), so an error about that half names the line that chose the base."""
    name = str(table.get("name"))
    spec = algorithm_spec(name, section, field or f"{section}.name")
    options: Any = algorithm_options(spec, name, {k: v for k, v in table.items() if k != "name"}, section, field)
    inner = wrapped(spec, options, section)
    if inner is None:
        return field or f"{section}.name", name
    return half_field({**inner.options, "name": inner.name}, inner.section, inner.field)


AFTER_AVERAGE = "measures each client's own model on the server after the average, from the client's state, which stays on its node"
"""Why a method whose client half is measured after the average (:class:`~chillfl.aggregation.base.MeasuredAfterAverage`)
cannot run on Flower (:func:`after_average`; the Flower apps say it of a half that asks by itself)."""


def after_average(capabilities: Capabilities, option: str, value: str, asked: bool) -> Capabilities:
    """``capabilities``, off Flower when the method's ``option`` set to ``value`` (``asked``) measures each client's model
    after the server's average (FedPer's ``local_eval = "averaged"``), with the refusal named by that option
    (:attr:`Capabilities.limited_by`); unchanged when not ``asked``. For a spec's ``capabilities_of``: the Flower apps
    read the declaration, not the option's name."""
    if not asked:
        return capabilities
    return replace(capabilities, on_flower=f'"{value}" {AFTER_AVERAGE}; set {option} to a value that measures on the node', limited_by=option)


def check_algorithm(name: str, options: Mapping[str, Any] | None, config: RunConfig, section: str = "algorithm", field: str | None = None) -> None:
    """Algorithm ``name``'s declared limits against the run: its plain-SGD requirement, its own ``check``, then those of
    the algorithm it wraps (:attr:`AlgorithmSpec.wraps`), checked the same way under the field that named it.

    Why: a wrapper runs its base's server maths and client half, so its effective limits are its own and its base's
    (:func:`effective_capabilities`: each part's plain-SGD limit is checked here, the base's naming the base); a plugin
    wrapper's ``check`` need not repeat the base's, and one that forgot to no longer lets the base's limits lapse.
    ``field``: the key that chose ``name`` in errors (default ``<section>.name``; a wrapped base: ``algorithm.base``).
    """
    spec = algorithm_spec(name, section, field)
    parsed: Any = algorithm_options(spec, name, options, section, field)
    check_plain_sgd(spec.declared(parsed), config, name)
    spec.check(parsed, config, section)
    inner = wrapped(spec, parsed, section)
    if inner is not None:  # the base's own limits, its plain SGD and check included, named by the line that chose it
        check_algorithm(inner.name, inner.options, config, inner.section, inner.field)


INSTANCE_OPTIONS = "aggregator.options"
"""How a refusal names an option of an aggregator passed from Python (``aggregator.options.f``: the instance's ``options``
dataclass, recorded under ``[algorithm.options]``), where a config's method names ``algorithm.f``."""


def built_by(aggregator: object, field: str = "aggregator") -> tuple[str, AlgorithmSpec, Any] | None:
    """(name, spec, options) of the spec that builds ``aggregator``: the one it names
    (:class:`~chillfl.aggregation.base.BuiltBySpec`, a plugin's class whose spec is not registered), else the first
    registered spec whose :attr:`AlgorithmSpec.makes` holds its type (:data:`_MADE`, which imports no module: a walk of
    every built-in module cost 0.3 s of each run whose plugin spec's build returned a built-in's instance). ``options``: the instance's ``options`` attribute where it is
    that spec's options dataclass, else None (what they decide cannot be checked). None when no spec builds it.
    Options a ``built_by()`` names that are not its spec's options dataclass (a dict) are a ConfigError on ``field``:
    every check after reads them as that dataclass."""
    if isinstance(aggregator, BuiltBySpec):
        name, options = aggregator.built_by()
        spec = algorithm_spec(name, field=field)
        if options is not None and not isinstance(options, spec.options):
            raise ConfigError(field, f"{type(aggregator).__name__}.built_by() names {name!r} with options of type {type(options).__name__}, "
                                     f"but that spec's options are a {spec.options.__name__} (or None)")
        return name, spec, options
    found = made_by(type(aggregator))  # the first registered to make it (a later spec derived from it, or an alias, builds configs only)
    if found is None:
        return None
    name, spec = found
    options = getattr(aggregator, "options", None)
    return name, spec, options if isinstance(options, spec.options) else None


def binder(aggregator: object, field: str = "aggregator") -> tuple[str, AlgorithmSpec, Any] | None:
    """(name, spec, options) of the spec whose :attr:`AlgorithmSpec.bind` binds ``aggregator`` to the run: the one that
    builds it (:func:`built_by`), else, for a subclass no spec makes, the spec with a bind that makes the nearest class
    it derives from (:func:`made_ancestor`), its options unchecked (None: a subclass's own options may add fields). Why:
    a bind fills what the run decides and refuses what disagrees with it, which such a subclass takes from its base's
    constructor: ``class MyDnC(DnC)`` named by path or passed from Python kept ``seed=None``, drawn as seed 0 in every
    run (each seed of a comparison drew alike, silently), ``MyNova()`` ran with momentum 0 under ``client.momentum =
    0.9``, ``MyScaffold(2)`` ran in a 4-client run. A subclass that fixes its seed (``super().__init__(7)``) is refused
    as ``DnC(7)`` is; one whose base's spec has no bind runs as it is built; its checks and capabilities stay its own
    (:attr:`AlgorithmSpec.makes`: matched by exact type)."""
    found = built_by(aggregator, field)
    if found is not None:
        return found
    ancestor = made_ancestor(type(aggregator))
    spec = None if ancestor is None else _REGISTRY.get(_MADE[ancestor])
    if ancestor is None or spec is None or spec.bind is None:
        return None
    return _MADE[ancestor], spec, None


def instance_capabilities(aggregator: object) -> Capabilities | None:
    """What the spec that builds ``aggregator`` (:func:`built_by`) declares under its options, a wrapper's completed by
    what its base declares (as :func:`effective_capabilities` completes a config's); None when no spec builds it and it
    wraps nothing (its class's own ``capabilities`` count). Why: ``PFedSim`` passed from Python keeps a personal model its
    spec declares and its class does not, and the run holds its client half to the declaration (:func:`check_declarations`);
    a wrapper no spec builds (a user's ``AroundAggregator`` around ``Ditto()``) declares its class's own, completed by its
    base's, as a plugin wrapper named in a config is, so one identity wrapper wraps FedAvg and Ditto alike."""
    found = built_by(aggregator)
    if found is None and not isinstance(aggregator, AroundAggregator):
        return None
    if found is None:
        own = declared_capabilities(type(aggregator), type(aggregator).__name__, "aggregator")
    else:
        _, spec, options = found
        own = spec.capabilities if options is None else spec.declared(options)
    if not isinstance(aggregator, AroundAggregator):
        return own
    base = aggregator.base
    inner = instance_capabilities(base)
    return own.wrapping(declared_capabilities(type(base), type(base).__name__, "aggregator.base") if inner is None else inner)


def instance_field(ctx: BuildContext, argument: str) -> str:
    """How a refusal names a constructor argument of an instance passed from Python (:attr:`AlgorithmSpec.bind`):
    ``aggregator.num_clients`` (``aggregator.base.rounds`` for a wrapper's base), beside its options'
    ``aggregator.options.<option>`` (``ctx.section``)."""
    return f"{ctx.section.removesuffix('.options')}.{argument}"


def run_value(given: Any, run: Any, field: str, what: str) -> Any:
    """``given``, an instance's constructor argument for what the run decides (``what``, the run's value ``run``; None:
    unknown), or the run's where it gave None or an equal value (its type too: a seed ``3.0``); a ConfigError on ``field`` (:func:`instance_field`) where the two differ
    (the config's builder takes the run's and has no other). For a spec's :attr:`AlgorithmSpec.bind`. The advice is the
    run's value as the argument, ``pass num_clients=3``: not every constructor takes None (``Scaffold(None)`` is a
    TypeError); an option's refusal says "leave it unset" instead (:func:`with_client_momentum`)."""
    if given is None:
        return run
    if run is not None and given != run:
        argument = field.rsplit(".", 1)[-1]
        raise ConfigError(field, f"must equal the run's {what} = {short_repr(run)}, got {short_repr(given)}; pass {argument}={short_repr(run)}")
    return given if run is None else run  # the run's own where equal: np.int64(3) or 3.0 for a seed of 3 failed at the first draw


def bind_instance(aggregator: object, ctx: BuildContext) -> None:
    """Bind an instance passed from Python to the run (``ctx``; its section: ``aggregator.options``) through the spec that
    builds it (:attr:`AlgorithmSpec.bind`), then the base a wrapper holds, under ``aggregator.base.options``: what the
    config's builder takes from the run, the instance takes too, or is refused where it disagrees. In place: called on
    the run's own copy, before :func:`check_instance` reads it. A subclass no spec makes is bound by the spec that makes
    the class it derives from (:func:`binder`)."""
    found = binder(aggregator)
    if found is not None and (bind := found[1].bind) is not None:
        name, spec, options = found
        if options is not None:  # the caller's options as written first: a bind may rewrite them (FedPHP's unset H)
            _check_options(spec, name, options, ctx.section)
        try:
            bind(aggregator, ctx)
        except AttributeError as exc:
            if type(aggregator) in spec.makes or isinstance(aggregator, BuiltBySpec):  # the spec's own class: its bug, as it is
                raise
            ancestor = made_ancestor(type(aggregator))
            if _raised_in_own_code(exc, type(aggregator), ancestor):  # the subclass's bug (its draw_generator's), as it is
                raise
            base = name if ancestor is None else ancestor.__name__
            raise ConfigError(_named_by(ctx.section), f"{type(aggregator).__name__} derives from {base}, whose binding to the run (the bind of spec "
                                                      f"{name!r}) needs what it lacks ({exc}): call {base}'s __init__ (super().__init__) and keep "
                                                      "its options' fields, or derive from AggregatorBase") from exc
    if isinstance(aggregator, AroundAggregator):
        bind_instance(aggregator.base, replace(ctx, section=f"{ctx.section.removesuffix('.options')}.base.options"))


def _raised_in_own_code(exc: BaseException, cls: type, ancestor: type | None) -> bool:
    """Whether the innermost method of ``cls`` that ``exc`` passed through is one the subclass defines (``cls`` or a class
    between it and ``ancestor``, the class a spec makes), not one it inherits: a base's bind may call a method a subclass
    overrides (FedGen's ``draw_generator``), and an AttributeError raised there is the subclass's own bug, not a base
    ``__init__`` it skipped. An inherited method further in (``super().draw_generator`` reading a field the subclass's
    options lack) keeps the refusal."""
    mro = cls.__mro__
    split = mro.index(ancestor) if ancestor in mro else len(mro)
    own, inherited = _codes(mro[:split]), _codes(mro[split:])
    last = False
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code in own or code in inherited:
            last = code in own
        tb = tb.tb_next
    return last


def _codes(classes: Iterable[type]) -> set[CodeType]:
    """The code of the functions these classes define: methods, static and class methods, properties' accessors."""
    codes: set[CodeType] = set()
    for member in (m for c in classes for m in vars(c).values()):
        if isinstance(member, property):
            functions: tuple[object, ...] = (member.fget, member.fset, member.fdel)
        elif isinstance(member, (staticmethod, classmethod)):
            functions = (member.__func__,)
        else:
            functions = (member,)
        codes.update(f.__code__ for f in functions if inspect.isfunction(f))
    return codes


def _named_by(section: str) -> str:
    """The field that named an aggregator bound under ``section``: ``algorithm.name`` (a class named by path),
    ``algorithm.base`` (a wrapper's base so named), ``aggregator`` / ``aggregator.base`` (an instance from Python)."""
    if section.endswith("_options"):
        return section.removesuffix("_options")
    return section.removesuffix(".options") if section.endswith(".options") else f"{section}.name"


def binds_to_run(aggregator: object) -> bool:
    """Whether the run binds ``aggregator`` (:func:`bind_instance`): the spec that builds it, or a wrapped base's, has
    :attr:`AlgorithmSpec.bind`. The run's record says so (``bound = true``, :func:`chillfl.experiment.plugged_records`),
    since such an instance runs otherwise than one an older chillfl ran unbound (``Scaffold(3)`` under
    ``client.momentum = 0.9``: momentum 0 then), and a folder that says nothing of it must not be resumed by this one."""
    found = binder(aggregator)
    if found is not None and found[1].bind is not None:
        return True
    return isinstance(aggregator, AroundAggregator) and binds_to_run(aggregator.base)


def _check_options(spec: AlgorithmSpec, name: str, options: Any, section: str) -> None:
    """An instance's options dataclass, built in Python and never parsed, parsed as a config's table is (types, ranges,
    ``validate``), each refusal on ``<section>.<option>``; a wrapper's, whose options name a base table, by its own
    ``validate`` alone (PA3Fed's delta > -1): its base is checked as its own instance."""
    if spec.wraps is None:
        written = {f.name: getattr(options, f.name) for f in dataclasses.fields(options) if getattr(options, f.name) is not None}
        algorithm_options(spec, name, written, section, "aggregator")
    elif callable(validate := getattr(options, "validate", None)):
        validate(section)


def check_instance(aggregator: object, config: RunConfig, model: nn.Module | None = None, section: str = INSTANCE_OPTIONS) -> None:
    """An aggregator passed from Python against the run, as its spec checks the method a config names (:func:`built_by`,
    :func:`check_algorithm`): its options' own ``validate``, its declared plain-SGD limit and linear head (against
    ``model``, the run's), its needs of that model (:attr:`AlgorithmSpec.check_model`) and the spec's ``check`` (Krum's
    ``f`` against the clients a round), each refusal naming ``aggregator.options.<option>``; then, for a wrapper
    (:class:`~chillfl.aggregation.base.AroundAggregator`: PA3Fed), the base it holds, as its own instance
    (``aggregator.base.options.<option>``). Without its spec's options, what they do not decide
    (:attr:`AlgorithmSpec.capabilities`). An instance no spec builds is checked by its class's own capabilities alone
    (the caller). What it takes from the run is bound first (:func:`bind_instance`), so the checks read what runs.

    Why: the run reads the spec, not how the aggregator came in: ``Scaffold(3)`` with Adam is refused as
    ``name = "scaffold"`` is. A wrapper's own ``check`` reads the base its options name, so an instance's is left out:
    its base is the one it holds, checked here.
    """
    found = built_by(aggregator)
    if found is not None:
        name, spec, options = found
        if options is None:
            declared = spec.capabilities
        else:  # a dataclass built in Python is not parsed: parsed here as a config's table is (and again after a bind rewrote it)
            _check_options(spec, name, options, section)
            declared = spec.declared(options)
        if model is not None:
            refuse_nonlinear_head(model, declared.linear_head, name)
            if spec.check_model is not None and options is not None:
                spec.check_model(options, model)
        check_plain_sgd(declared, config, name)
        if options is not None and spec.wraps is None:
            spec.check(options, config, section)
    if isinstance(aggregator, AroundAggregator):
        check_instance(aggregator.base, config, model, f"{section.removesuffix('.options')}.base.options")


def check_named_classes(name: str, options: Mapping[str, Any] | None, aggregator: object, config: RunConfig, model: nn.Module,
                        section: str = "algorithm", field: str | None = None) -> None:
    """``aggregator``, built from the config's algorithm ``name`` (:func:`make_aggregator`), held to the spec that makes it
    where ``name`` names an aggregator class (an import path, an entry point: :class:`ClassBuilder`), as an instance
    passed from Python is (:func:`check_instance`), each refusal on ``<section>.<option>``; a wrapper's base named so
    (``base = "pkg:Rule"``), the base it holds, under its own section (``algorithm.base_options``).

    Why: ``name = "pkg:Rule"`` for a class a registered spec makes (``makes=``) or that names its spec (``built_by``)
    was checked by the class's own declarations alone, so a config its spec refuses (Krum's ``f`` against the clients
    a round) ran, while ``Rule()`` passed from Python and the spec's own name were refused. The spec is known once
    the class is built (a ``built_by`` per instance), so this is asked of the built aggregator, after
    :func:`check_algorithm`."""
    spec = algorithm_spec(name, section, field)
    if isinstance(spec.build, ClassBuilder):
        check_instance(aggregator, config, model, section)  # a wrapper class's base too, as an instance's
        return
    # a spec whose builder returns an instance of a class another registered spec makes: that spec's checks too
    parsed = algorithm_options(spec, name, options, section, field)
    hold_to_maker(spec, name, aggregator, field or f"{section}.name", lambda: check_instance(aggregator, config, model), parsed, section)
    inner = wrapped(spec, parsed, section)
    if inner is not None and isinstance(aggregator, AroundAggregator):  # the base its options name is the one it holds
        check_named_classes(inner.name, inner.options, aggregator.base, config, model, inner.section, inner.field)


def foreign_maker(spec: AlgorithmSpec, aggregator: object) -> str | None:
    """The name of the registered spec, other than ``spec``, that builds ``aggregator`` or binds it to the run
    (:func:`binder`: the rule an instance passed from Python is held to), where ``spec``'s builder returned it, for
    that spec's checks; None when no spec does, when ``spec`` itself does, or when ``aggregator``'s class is one of
    ``spec``'s own :attr:`AlgorithmSpec.makes` (a spec derived from a built-in with ``dataclasses.replace``: its checks
    are the config's, already run; it is bound all the same, :func:`run_binder`). A proxy's class is made by no spec: None."""
    if type(aggregator) in spec.makes or not found_maker(type(aggregator)):  # none: no lookup at all (FedAvg's build)
        return None
    found = binder(aggregator)
    return None if found is None or found[1] is spec else found[0]


def run_binder(spec: AlgorithmSpec, aggregator: object) -> str | None:
    """The name of the registered spec whose :attr:`AlgorithmSpec.bind` binds ``aggregator`` (:func:`binder`), where
    ``spec``'s builder returned it and is not that spec's own build; None when no bind binds it, or ``spec``'s build is
    the binder's (a built-in's, a spec derived from it that kept its build, one spec under two names: that build passed
    the run's values itself).

    Why not :func:`foreign_maker`'s exemption of ``spec``'s own ``makes``: a spec derived with ``dataclasses.replace(
    dnc.SPEC, build=...)`` (or declaring ``makes=(DnC,)``) whose build left the seed out drew with seed None, 0 in every
    run; the bind fills what the build left unset and passes what it set equal to the run's, as for an instance passed
    from Python."""
    if not found_maker(type(aggregator)):  # none: no lookup at all (FedAvg's build)
        return None
    found = binder(aggregator)
    return None if found is None or found[1].bind is None or found[1].build is spec.build else found[0]


def copied_for_run(aggregator: Aggregator, terms: Sequence[Term], model: nn.Module) -> tuple[Aggregator, list[Term]]:
    """``aggregator`` copied once (``copy.deepcopy``) to be bound to a run, and ``terms`` as they are but for those that are
    the aggregator itself, which are the copy; the run's ``model`` and the terms the aggregator holds stay theirs (the copy
    holds them, not copies of them). Raises what ``copy.deepcopy`` raises.

    Why the aggregator is left out of the memo: an aggregator that is also one of its own terms (one object, both the server
    rule and a loss term) mapped to itself, so the "copy" was the caller's object, the run's seed was written into it, and
    the next run (a comparison's second seed) was refused. Why a term that is the aggregator becomes the copy: the run
    would otherwise call the caller's object as the term and the copy as the rule, two states where the build had one."""
    memo: dict[int, Any] = {id(model): model, **{id(t): t for t in terms if t is not aggregator}}
    own = copy.deepcopy(aggregator, memo)
    return own, [copy.deepcopy(t, memo) if t is aggregator else t for t in terms]  # the memo's entry: ``own``


def run_copy(built: Built, model: nn.Module, name: str, field: str) -> Built:
    """What algorithm ``name``'s build returned, its aggregator copied (:func:`copied_for_run`, as
    :func:`chillfl.experiment.build_algorithm` copies an instance passed from Python) to be bound to this run; the
    terms and the run's ``model``, which the build was given, stay as built (the copy holds them, not copies of them).
    A ConfigError on ``field`` where the aggregator cannot be copied.

    Why: binding writes the run's values into the instance, and a build returning one shared instance (a module's,
    a cache's) had the first run's seed written into it, so the next run in the process (a comparison's second seed)
    was refused (``aggregator.seed: must equal the run's seed = 1, got 0; pass seed=1``) for a seed never passed. Only
    the aggregator: the bind writes nothing into a term, and copying the terms too refused a term holding a lock (on
    ``algorithm.name``, blaming the aggregator) and copied whatever large objects a term holds, every build."""
    aggregator, terms = built
    try:
        return copied_for_run(aggregator, terms, model)
    except (TypeError, RuntimeError, copy.Error) as exc:
        raise ConfigError(field, f"{name!r}: its build returned {type(aggregator).__name__}, which is bound to the run on a copy, as one "
                                 f"passed from Python is, and copy.deepcopy cannot copy it ({exc}); give it attributes copy.deepcopy "
                                 "can copy") from None


def bound_to_run(spec: AlgorithmSpec, name: str, built: Built, ctx: BuildContext, given: Any, field: str) -> Built:
    """``built``, returned by ``spec``'s build (named ``name`` by ``field``; ``given``: the options it received, parsed
    from ``ctx.section``), with its aggregator bound to the run by the spec that binds its class (:func:`run_binder`),
    on a copy (:func:`run_copy`), as an instance passed from Python is; as it is where none does. Refusals named as
    :func:`hold_to_maker` names them."""
    maker = None
    try:
        maker = run_binder(spec, built[0])
        if maker is None:
            return built
        own = run_copy(built, ctx.model, name, field)
        bind_instance(own[0], replace(ctx, section=INSTANCE_OPTIONS))
        return own
    except ConfigError as exc:
        named = on_spec_field(exc, name, built[0], maker, field, given, ctx.section)
        if named is None:
            raise
        raise named from None


def hold_to_maker(spec: AlgorithmSpec, name: str, aggregator: object, field: str, hold: Callable[[], None], given: Any = None,
                  section: str = "algorithm") -> None:
    """``hold()`` (:func:`check_instance` of ``aggregator``) where ``aggregator``, returned by ``spec``'s builder (``spec``
    named ``name`` by ``field``, given the options ``given`` parsed from ``section``), is an instance of a class another
    registered spec makes (:func:`foreign_maker`), refusals named by :func:`on_spec_field`.

    Why: a config naming the spec read the spec's declarations alone, so a builder returning ``Scaffold(2)`` ran with
    Adam under a spec that declared no ``plain_sgd``, while ``chillfl.run(aggregator=Scaffold(2))`` with Adam was
    refused: the method run is the instance's, and so are its limits (both specs' hold). Its bind: :func:`bound_to_run`."""
    maker = None
    try:
        maker = foreign_maker(spec, aggregator)
        if maker is not None:
            hold()
    except ConfigError as exc:
        named = on_spec_field(exc, name, aggregator, maker, field, given, section)
        if named is None:
            raise
        raise named from None


def on_spec_field(exc: ConfigError, name: str, aggregator: object, maker: str | None, field: str, given: Any, section: str) -> ConfigError | None:
    """How a refusal of ``aggregator``, returned by algorithm ``name``'s build (named by ``field``, its options ``given``
    parsed from ``section``) and held to the spec ``maker`` that makes or binds its class, is named: None (as raised)
    on the run's own fields (``client.optimizer``, ``model``), which an instance passed from Python meets alike; on the
    config's option (``algorithm.f``) where the refused one of the instance (``aggregator.options.f``) is one the
    build passed on from it (:func:`given_option`); else on ``field``, quoting the instance's field (``aggregator.seed``,
    or an option the build set itself), which the config did not write.

    Why: ``algorithm.f = 2`` passed on to ``DnC`` was refused on ``algorithm.name`` as "(aggregator.options.f: ...)
    refused as one passed from Python is", to a user who wrote ``algorithm.f`` and passed nothing from Python."""
    if exc.field != "aggregator" and not exc.field.startswith("aggregator."):
        return None
    made = "" if maker is None else f", which the registered spec {maker!r} makes"
    option = given_option(exc.field, aggregator, given)
    if option is not None:
        return ConfigError(f"{section}.{option}", f"{exc.message} (the build of {name!r} passed it on to the {type(aggregator).__name__} it "
                                                  f"returned{made})")
    return ConfigError(field, f"{name!r}: its build returned {type(aggregator).__name__}{made}, refused as one passed from Python "
                              f"is ({exc.field}: {exc.message})")


def given_option(refused: str, aggregator: object, given: Any) -> str | None:
    """The option of ``given`` (a spec's parsed options, which its build received) that ``refused``, a field of
    ``aggregator``'s options (``aggregator.options.f``), came from: a field of both by that name whose values are
    equal (the build passed it on); None otherwise (an option the build set itself, or no options to compare)."""
    option = refused.removeprefix(f"{INSTANCE_OPTIONS}.")
    if option == refused or given is None or isinstance(given, type) or not dataclasses.is_dataclass(given):
        return None
    found = binder(aggregator)
    held = None if found is None else found[2]
    if held is None or option not in {f.name for f in dataclasses.fields(given)} or option not in {f.name for f in dataclasses.fields(held)}:
        return None
    return option if getattr(held, option) == getattr(given, option) else None


def run_capabilities(table: Mapping[str, Any], aggregator: object) -> Capabilities:
    """What the run's algorithm declares: the ``[algorithm]`` table's (its options, a wrapped base's included) where it names
    a registered algorithm or a class by path; for an instance passed from Python, what the spec that builds it declares
    (Ditto()'s takes_weights), else its class's own ``capabilities`` or, without one, the limits it inherits
    (:func:`declared_capabilities`).

    Why: the run's refusals read the instance so (:func:`chillfl.experiment.build_algorithm`), and this read the class's own
    attribute alone: ``class MyNova(FedNova): pass`` was refused Adam for FedNova's plain_sgd while this said it had no
    limit (a privacy mechanism or a listing asking here saw none)."""
    try:
        algorithm_spec(str(table.get("name")), "algorithm")
    except ConfigError:
        by_spec = instance_capabilities(aggregator)
        if by_spec is not None:
            return by_spec
        return declared_capabilities(type(aggregator), type(aggregator).__name__, "aggregator")
    return configured_capabilities(table)


def tolerates_bad_clients(table: Mapping[str, Any], aggregator: object) -> bool:
    """Whether the run's algorithm is built to survive bad clients: its spec declares the byzantine clients it withstands
    (:attr:`AlgorithmSpec.tolerates`) or its capabilities say so
    (:attr:`~chillfl.capabilities.Capabilities.withstands_bad_clients`: a registered spec's, a class's named by path or
    passed from Python, a wrapper's completed by its base's, as :func:`run_capabilities` reads them).

    Why: such a rule is meant to survive a bad upload, so the server leaves a non-finite one out of the round
    (:func:`chillfl.aggregation.uploads.finite_uploads`) where any other rule stops the run naming the client."""
    if run_capabilities(table, aggregator).withstands_bad_clients:
        return True
    try:
        return algorithm_spec(str(table.get("name")), "algorithm").tolerates is not None
    except ConfigError:
        found = built_by(aggregator)
        return found is not None and found[1].tolerates is not None


def largest_tolerated(name: str, options: Mapping[str, Any] | None, config: RunConfig, up_to: int, section: str = "algorithm") -> int:
    """The largest value in [1, ``up_to``] of the option algorithm ``name`` counts the byzantine clients it withstands by
    (:attr:`AlgorithmSpec.tolerates`) that the algorithm accepts in ``config``, its other ``options`` as written; 0 when
    none does (or it declares no such option).

    Why: a note that suggests a value must suggest one the rule takes (Krum needs clients per round > 2f + 2 and
    m <= n - f, Bulyan >= 4f + 3). Each value is checked as if the table set it (:func:`check_algorithm`: parsed,
    validated, then the spec's own ``check``), so the bound is asked where it is written, never restated.
    """
    key = algorithm_spec(name, section).tolerates
    if key is None:
        return 0
    for value in range(up_to, 0, -1):
        try:
            check_algorithm(name, {**(options or {}), key: value}, config, section)
        except ConfigError:
            continue
        return value
    return 0


def check_plain_sgd(capabilities: Capabilities, config: RunConfig, method: str) -> None:
    """A ConfigError when the method declares ``plain_sgd`` (its server maths assumes heavy-ball SGD steps at one lr a round)
    and the client optimiser differs."""
    why = capabilities.plain_sgd
    if why is None:
        return
    c = config.client
    if c.optimizer != "sgd":
        raise ConfigError("client.optimizer", f"{why} assumes SGD steps, so {method} needs optimizer = 'sgd', got {c.optimizer!r}")
    if c.nesterov:
        raise ConfigError("client.nesterov", f"{why} counts heavy-ball momentum steps, so {method} needs nesterov = false")
    if c.lr_schedule != "constant" and c.lr_schedule_over == "steps":
        raise ConfigError("client.lr_schedule_over", f"{why} assumes one lr for a round's steps, so {method} needs lr_schedule_over = 'rounds'")

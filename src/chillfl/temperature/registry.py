"""Temperature policies by name: ``[temperature] policy = "..."`` -> a :class:`PolicySpec`.

The mechanism, not the catalogue: each built-in's spec lives next to its code and is named there
with :func:`register_policy` (``base.py``: ``none`` and ``fixed``; ``fedchill.py``: ``fedchill``);
a lookup imports the module of that name, or every module of this package (``fixed`` lives in ``base.py``). A user's policy comes in by import
path or a ``chillfl.plugins`` entry point, as a policy class or a ``PolicySpec``, and becomes the
same spec (:func:`user_policy`); a plugin may also call :func:`register_policy` itself.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
import torch

from chillfl.capabilities import Capabilities, TakesName, declared
from chillfl.errors import ConfigError
from chillfl.options import Chosen, NoOptions, parse_options, short_repr
from chillfl.plugins import (Call, Hook, Registry, building, check_calls, check_constructor, check_hooks, check_spec_parts, has_methods, is_custom, look_up, missing_hooks,
                             plugin_names, refuse_bad_registration)
from chillfl.temperature.policy import TemperatureHalf, TemperaturePolicy

if TYPE_CHECKING:  # annotations only
    from chillfl.config import RunConfig

ClassCounts = np.ndarray | Callable[[], np.ndarray]
"""The [clients, classes] label-count matrix, or a function computing it (called only by a policy that must read it)."""

Check = Callable[[Any, "RunConfig", str], None]
"""``check(options, config, section)``: a ConfigError on a misfit of the parsed options with the whole run."""


def _no_check(options: Any, config: RunConfig, section: str) -> None:
    return None


def _no_limits(options: Any) -> Capabilities:
    return Capabilities()


@dataclass(frozen=True)
class PolicySpec:
    """A policy's option dataclass, how to build it from (options, class counts), one line about it, and what it declares."""

    options: type
    build: Callable[[Any, ClassCounts], TemperaturePolicy]
    """``counts`` may be a function computing them (a pass over every client's labels): a policy calls it only if it must."""
    summary: str
    capabilities: Callable[[Any], Capabilities] = _no_limits
    """What core code may ask, from the parsed options (FedChill's ``on_flower`` depends on its
    ``normalisation`` and ``measure``: a server that reads every client's label counts cannot run on Flower)."""
    check: Check = _no_check
    """Its checks against the whole run config, before anything is built (also on ``--dry-run``)."""
    takes_names: Mapping[str, TakesName] = dataclasses.field(default_factory=dict, hash=False)
    """Its options that take one of a registry's names (FedChill's ``measure``), by option: the configuration reference
    lists those names as the option's allowed values (:class:`~chillfl.capabilities.TakesName`). Empty: none."""

    def calls(self) -> list[Hook]:
        """Each hook the runtime calls: (field, the hook or None, the parameters it is called with), checked where the spec is read."""
        return [
            ("build", self.build, ("options", "counts")), ("capabilities", self.capabilities, ("options",)), ("check", self.check, ("options", "config", "section")),
        ]


_REGISTRY: Registry[PolicySpec] = Registry("temperature policy", package="chillfl.temperature")
"""The built-ins, each registered by its own module of :mod:`chillfl.temperature`; a lookup imports the module of that name (:meth:`Registry.get`)."""


def register_policy(name: str, spec: PolicySpec) -> PolicySpec:
    """Name ``spec`` ``name``: how each built-in registers its spec next to its code, and a plugin may too.

    Returns ``spec`` (``SPEC = register_policy("fixed", PolicySpec(...))``); a name registered by another module is an error, by its own module again replaces (:class:`~chillfl.plugins.Registry`).
    """
    refuse_bad_registration(name, spec, PolicySpec, "register_policy")
    check_spec_parts(name, spec.options, spec.summary, "PolicySpec", "temperature.policy")
    check_hooks(name, spec.calls(), "temperature.policy")  # registered by a plugin module: its hooks checked as a spec named by import path
    return _REGISTRY.register(name, spec)


def registered_policies() -> dict[str, PolicySpec]:
    """The registered specs by name (a copy: the registry changes through :func:`register_policy` only)."""
    return _REGISTRY.specs()


POLICY_METHODS = ("temperature", "observe", "client_half", "state_dict", "load_state_dict")
"""What a user's policy class has (:class:`~chillfl.temperature.base.TemperaturePolicy`): how a registry recognises one."""

POLICY_CALLS: tuple[Call, ...] = (
    ("temperature", ("client_id", "round")), ("observe", ("client_id", "round", "local_accuracy")), ("client_half", ("num_classes",)),
    ("state_dict", ()), ("load_state_dict", ("state",)),
)
"""How the run calls each of :data:`POLICY_METHODS` (:func:`~chillfl.plugins.check_calls`, on the built policy)."""

HALF_METHODS = ("temperature", "finish")
"""What a policy's client half has (:class:`~chillfl.temperature.policy.TemperatureHalf`)."""

HALF_CALLS: tuple[Call, ...] = (("temperature", ("state", "offered", "labels")), ("finish", ("state", "temperature", "local_accuracy")))
"""How every client calls each of :data:`HALF_METHODS` (:func:`~chillfl.plugins.check_calls`, on the built half)."""

PROBED_CLIENTS = 32
"""How many clients (ids 0, 1, ...) :func:`check_built_policy` asks for their first round's T when the policy declares
``trains_at``: a plugin's per-client T shows among a few, and a run of 100,000 clients is not asked 100,000 times."""


PROBE_COPY_BYTES = 64 * 2 ** 20
"""The most tensor and array bytes a policy (with its client half) may hold for :func:`check_trains_at` to copy it
and ask: a policy holding more (a cache, a model) is not asked, as one that cannot be copied is not."""

_PROBE_WALK_OBJECTS = 100_000
"""The most objects :func:`_holds_little` visits before it deems the state large (not asked): the walk stays cheap."""


def policy_names() -> list[str]:
    """Registered names and the ``chillfl.plugins`` entry points that name a policy."""
    return sorted({*registered_policies(), *plugin_names(is_policy, registered_policies(), "temperature.policy")})


def is_policy(obj: Any) -> bool:
    """Whether a plugin's object is a temperature policy: a :class:`PolicySpec` or a policy class."""
    return isinstance(obj, PolicySpec) or has_methods(obj, POLICY_METHODS)


def class_capabilities(cls: type, name: str, field: str) -> Capabilities:
    """A user's policy class's own ``capabilities`` attribute (none: it declares nothing), not one it inherits.

    Read the same whether the config names the class or an instance of it is passed from Python
    (``chillfl.run(policy=...)``), as an aggregator class's is.
    """
    own = vars(cls).get("capabilities")
    return Capabilities() if own is None else declared(own, name, field)


def user_policy(obj: Any, name: str, field: str) -> PolicySpec:
    """A user's object (import path or entry point) as a :class:`PolicySpec`, or a ConfigError on ``field``.

    ``obj`` is a ``PolicySpec`` (the built-ins' form), or a policy class: ``cls(options)`` when it
    declares an ``Options`` dataclass (parsed and validated like a built-in's), ``cls()`` otherwise; a class
    declares its capabilities in its own ``capabilities`` attribute, as an aggregator class does (it was
    silently ignored: a class that said ``on_flower`` still ran on Flower).
    """
    if isinstance(obj, PolicySpec):
        if not callable(obj.capabilities):
            raise ConfigError(field, f"{name!r}: its PolicySpec's capabilities must be a function of its options returning a chillfl.extend.Capabilities, "
                                     f"got {type(obj.capabilities).__name__}")
        check_spec_parts(name, obj.options, obj.summary, "PolicySpec", field)
        check_hooks(name, obj.calls(), field)
        return obj
    if not isinstance(obj, type):
        raise ConfigError(field, f"{name!r} must name a temperature policy class or a PolicySpec, got {type(obj).__name__}")
    if not has_methods(obj, POLICY_METHODS):
        missing = [m for m in POLICY_METHODS if not callable(getattr(obj, m, None))]
        raise ConfigError(field, f"{name!r} is not a temperature policy: it lacks {', '.join(missing)} (see chillfl.extend.TemperaturePolicy)")
    capabilities = class_capabilities(obj, name, field)
    options = getattr(obj, "Options", None)
    if options is None:
        check_constructor(obj, False, name, field)
        return PolicySpec(NoOptions, lambda o, counts: obj(), name, capabilities=lambda o: capabilities)
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(field, f"{name!r}: its Options must be a dataclass, got {options!r}")
    check_constructor(obj, True, name, field)
    return PolicySpec(options, lambda o, counts: obj(o), name, capabilities=lambda o: capabilities)


def policy_spec(name: Any, section: str = "temperature") -> PolicySpec:
    """The registered policy ``name``, or a user's (``"pkg.module:Name"``, a ``chillfl.plugins`` entry point)."""
    spec: PolicySpec = look_up(name, f"{section}.policy", _REGISTRY.view(), is_policy, policy_names, user_policy)
    return spec


def policy_options(spec: PolicySpec, name: str, options: Mapping[str, Any] | None, section: str = "temperature") -> Any:
    """Policy ``spec``'s (named ``name``) options parsed from ``options`` (its table without ``policy``)."""
    return parse_options(spec.options, options, section, Chosen(f"{section}.policy", name, registered_policies))


def parse_policy(table: Mapping[str, Any], section: str = "temperature") -> tuple[PolicySpec, Any]:
    """The spec ``table['policy']`` names and the rest of the table parsed as its options."""
    spec = policy_spec(table.get("policy"), section)
    return spec, policy_options(spec, str(table.get("policy")), {k: v for k, v in table.items() if k != "policy"}, section)


def make_policy(table: Mapping[str, Any], class_counts: ClassCounts, section: str = "temperature") -> TemperaturePolicy:
    """Build the policy named by ``table['policy']`` with the rest of the table as its options.

    ``class_counts``: the [clients, classes] matrix, or a function computing it, called only by a policy that must read it.
    """
    spec, options = parse_policy(table, section)
    name = table.get("policy")
    with building(name, f"{section}.policy", isinstance(name, str) and name in _REGISTRY.view(), " (called as build(options, class_counts))"):
        policy = spec.build(options, class_counts)
    if missing_hooks(policy, POLICY_METHODS):  # a plugin's builder: its mistake is one line, not an AttributeError mid-run (a proxy's hooks count)
        raise ConfigError(f"{section}.policy", f"{table.get('policy')!r}: its PolicySpec's build must return a temperature policy "
                                               f"(see chillfl.extend.TemperaturePolicy), got {_got(policy)}")
    return policy


def _got(obj: object) -> str:
    """What a builder returned, in a refusal: a class is said to be one (``got type`` named nothing)."""
    return f"the class {obj.__name__}, not an instance: call it" if isinstance(obj, type) else f"{short_repr(obj)} ({type(obj).__name__})"


def policy_capabilities(table: Mapping[str, Any], section: str = "temperature") -> Capabilities:
    """What the configured policy declares for its options (e.g. whether it runs on Flower)."""
    spec, options = parse_policy(table, section)
    return _declared(spec, options, table, section)


def _declared(spec: PolicySpec, options: Any, table: Mapping[str, Any], section: str) -> Capabilities:
    """What ``spec`` declares under its parsed ``options``, a plugin's declaration checked (:func:`declared`)."""
    return declared(spec.capabilities(options), str(table.get("policy")), f"{section}.policy")


def constant_temperature(table: Mapping[str, Any], policy: TemperaturePolicy | None = None) -> float | None:
    """The one temperature a ``[temperature]`` table trains every client at, every round, as its policy declares it
    (:attr:`~chillfl.capabilities.Capabilities.trains_at`); None for a policy that sets T per client or round, a table
    that names no policy (a variant's overrides of the base's), or one this table misconfigures (the run's own checks
    say why, in their one line).

    ``policy``: the instance passed from Python that a ``custom`` table records (a comparison's, :class:`Plugged`),
    read as :func:`built_policy_capabilities` reads it, so that its declared ``trains_at`` gets the step-size controls
    and caveats the same class named by import path gets; without it a ``custom`` table has no T to read (None)."""
    if "policy" not in table:
        return None
    if is_custom(table.get("policy")):
        if policy is None:
            return None
        try:
            return built_policy_capabilities(table, policy).trains_at
        except ConfigError:  # a malformed declaration: the run's own checks refuse it in their one line
            return None
    try:
        return policy_capabilities(table).trains_at
    except ConfigError:
        return None


def built_policy_capabilities(table: Mapping[str, Any], policy: TemperaturePolicy) -> Capabilities:
    """What the run's built ``policy`` declares: its spec's, under ``table``'s options; one passed from Python (``custom``)
    declares its instance's own ``capabilities`` (a value it was built with), else its class's own (:func:`class_capabilities`).

    Why: core code asks what a policy declares (one T for every client: ``trains_at``), never which class it is, so a
    plugin's constant policy is recorded and analysed as the bundled ``fixed`` is."""
    if is_custom(table.get("policy")):
        own = vars(policy).get("capabilities") if hasattr(policy, "__dict__") else None
        name = type(policy).__name__
        return class_capabilities(type(policy), name, "policy") if own is None else declared(own, name, "policy")
    return policy_capabilities(table)


def trains_at(table: Mapping[str, Any], policy: TemperaturePolicy) -> float | None:
    """The one T the run's built ``policy`` trains every client at, every round, as it declares it
    (:attr:`~chillfl.capabilities.Capabilities.trains_at`); None: it sets T per client or round."""
    return built_policy_capabilities(table, policy).trains_at


def check_policy(config: RunConfig, section: str = "temperature") -> None:
    """Parse ``config``'s policy table and run the spec's own ``check`` against the whole run.

    A policy that declares that the clients' accuracy steers it (``steers_by_accuracy``) in a run that measures no
    client's accuracy (``eval.clients = "none"``) is refused here, before anything trains: its ``observe`` would first
    meet the missing accuracy after round 1's local training (a whole round's work, at full scale an hour)."""
    spec, options = parse_policy(config.temperature, section)
    spec.check(options, config, section)
    steers = _declared(spec, options, config.temperature, section).steers_by_accuracy
    if steers and config.eval.clients == "none":
        raise ConfigError("eval.clients", f"{steers} reads each client's accuracy after its training, which eval.clients = 'none' "
                                          "does not measure; set eval.clients = 'sampled', or switch that off")


def steers_on_test_rows(config: RunConfig, policy: TemperaturePolicy | None = None) -> str | None:
    """What of the run's temperature policy steers the clients' training by their accuracy on test rows: its
    :attr:`~chillfl.capabilities.Capabilities.steers_by_accuracy` when the run has no validation split
    (``eval.validation = 0``), else None (nothing steers, or validation rows do).

    Why: without a validation split that accuracy is each client's evaluation split's, drawn from the test rows the
    run reports its accuracy on. One answer for the run's note on stderr
    (:func:`chillfl.experiment.steering_note`) and a comparison's steering caveat
    (:func:`chillfl.report.caveats.steering_caveat`), so the two never disagree. ``policy``: one passed from Python
    (``custom``), asked what its class declares, as that class named in the config would be (:func:`class_capabilities`);
    without it a ``custom`` policy declares nothing.
    """
    if config.eval.validation > 0:
        return None
    if is_custom(config.temperature.get("policy")):
        if policy is None:
            return None
        return built_policy_capabilities(config.temperature, policy).steers_by_accuracy
    return policy_capabilities(config.temperature).steers_by_accuracy


def check_built_policy(table: Mapping[str, Any], policy: TemperaturePolicy, num_classes: int, num_clients: int,
                       labels: Callable[[int], torch.Tensor], field: str) -> None:
    """The run's built ``policy`` (from ``table``, or passed from Python: ``custom``) against how the run calls it, each
    misfit one ConfigError on ``field`` before anything is written: its hooks' parameters (:data:`POLICY_CALLS`), its
    client half's hooks and theirs (:data:`HALF_CALLS`), and its declared ``trains_at`` against the T its first round
    trains each client at (:func:`check_trains_at`). ``labels(cid)``: client ``cid``'s training labels, which a client
    half may read for its T.

    Why: a client half's ``temperature`` or ``finish`` with the wrong parameters (or none) was a TypeError or
    AttributeError traceback at the first client, after the run had written its folder; the server half's hooks were
    checked, the half's not. Calling ``client_half`` here also runs its own checks against the data (FedChill's p_g per
    class)."""
    check_calls(policy, POLICY_CALLS, field)
    shown, built_in = _named(table, policy)
    with building(shown, field, built_in, " (called as client_half(num_classes))"):
        half = policy.client_half(num_classes)
    if half is not None:
        lacks = missing_hooks(half, HALF_METHODS)
        if lacks:
            raise ConfigError(field, f"{type(policy).__name__}'s client half {type(half).__name__} lacks {', '.join(lacks)}: a temperature policy's "
                                     "client half has temperature(state, offered, labels) and finish(state, temperature, local_accuracy) "
                                     "(see chillfl.extend.TemperatureHalf)")
        check_calls(half, HALF_CALLS, field)
    check_trains_at(table, policy, half, num_clients, labels, field)


def check_trains_at(table: Mapping[str, Any], policy: TemperaturePolicy, half: TemperatureHalf | None, num_clients: int,
                    labels: Callable[[int], torch.Tensor], field: str) -> None:
    """A ConfigError on ``field`` when ``policy`` declares ``trains_at`` (:func:`built_policy_capabilities`) and a client
    of the first round (round 0; the first :data:`PROBED_CLIENTS` ids) would train at another T: the server half's
    ``temperature(client_id, 0)`` where it has no client half, else the half's ``temperature({}, offered, labels)``, the
    call a client makes before it has a state of its own. Asked of a copy, so a policy that draws or counts as it answers
    runs as it would have; one that cannot be copied is not asked, nor one whose tensors and arrays exceed
    :data:`PROBE_COPY_BYTES` (:func:`_holds_little`): its copy doubled the memory (CPU or GPU) the policy holds at
    every build of a run, a comparison's or a resume's. Sharing its tensors with the copy would not be sound, as a
    ``temperature`` that updates one in place (a counter) would change the run it is asked for.

    Why: the step-size controls, the comparison's caveats, the records (no per-client T) and ``analyze grad-norms`` read
    the declared T, not the ones trained at; a declaration that disagrees (a subclass of ``ConstantTemperature`` whose
    ``temperature`` sets T per client) made them all wrong without a word. Sound, not complete: a refusal shows a T the
    run would train at, but a policy that agrees at round 0 and not later passes."""
    said = built_policy_capabilities(table, policy).trains_at
    if said is None or not _holds_little((policy, half), PROBE_COPY_BYTES):
        return
    try:
        probe, probe_half = copy.deepcopy((policy, half))
    except Exception:  # noqa: BLE001 - a plugin's object that cannot be copied: asking the run's own could change its run
        return
    shown, built_in = _named(table, policy)
    for cid in range(min(num_clients, PROBED_CLIENTS)):
        with building(shown, field, built_in, f" (asked for client {cid}'s T at round 0)"):
            offered = probe.temperature(cid, 0)
            used = offered if probe_half is None else probe_half.temperature({}, offered, labels(cid))
        try:
            value = float(used)
        except (TypeError, ValueError):
            return  # not a number: training says so, in its own words
        if not math.isclose(value, said, rel_tol=1e-6):
            where = f"temperature({cid}, 0)" if probe_half is None else f"client half's temperature({{}}, {offered!r}, labels) for client {cid}"
            raise ConfigError(field, f"{shown!r} declares trains_at = {said:g} (the one T for every client and round, which the step-size controls, "
                                     f"caveats and records read), but its {where} is {value:g} at round 0; declare trains_at only for a policy "
                                     "that trains every client at that T every round, none for one that sets T per client or round")


def _named(table: Mapping[str, Any], policy: TemperaturePolicy) -> tuple[str, bool]:
    """(how a refusal names the built ``policy``: its config name, or its class for one passed from Python; whether
    that name is a built-in's, whose errors :func:`~chillfl.plugins.building` lets through as chillfl's own)."""
    name = table.get("policy")
    if is_custom(name) or not isinstance(name, str):
        return type(policy).__name__, False
    return name, name in _REGISTRY.view()


def _holds_little(obj: object, limit: int) -> bool:
    """Whether the tensors and numpy arrays reachable from ``obj`` (through attributes, ``__slots__`` aside, and the
    items of dicts, lists, tuples and sets: what ``copy.deepcopy`` copies) hold at most ``limit`` bytes, each counted
    once. A walk past :data:`_PROBE_WALK_OBJECTS` objects is deemed large. Why: telling when a copy is cheap costs no
    copy (:func:`check_trains_at`)."""
    seen: set[int] = set()
    stack: list[object] = [obj]
    total = 0
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, (str, bytes, int, float, bool, type(None), type)):
            continue
        seen.add(id(item))
        if len(seen) > _PROBE_WALK_OBJECTS:
            return False
        if isinstance(item, torch.Tensor):
            total += item.nelement() * item.element_size()
        elif isinstance(item, np.ndarray):
            total += item.nbytes
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif not inspect.isroutine(item) and not inspect.ismodule(item):  # deepcopy shares functions and modules
            try:
                stack.extend(vars(item).values())
            except TypeError:  # no __dict__ (a builtin's object): nothing of ours to count
                pass
        if total > limit:
            return False
    return True

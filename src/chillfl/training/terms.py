"""Loss terms: what a term of the local objective is (:class:`LossTerm`, :class:`BatchTerm`), and terms by name.

``[objective] terms = ["proximal", "pkg.mod:Term", ...]`` adds named terms to any method that accepts terms.

The mechanism, not the catalogue: a built-in term's :class:`TermSpec` is registered next to its
code with :func:`register_term` (:mod:`chillfl.training.objective`: ``proximal``; every module of
:mod:`chillfl.training.term_kinds`: ``ntd``, ``decorr``); a plugin
registers its own the same way, or is named by import path or ``chillfl.plugins`` entry point, as
a ``TermSpec`` or a term class (``cls(options)`` when it declares an ``Options`` dataclass,
``cls()`` otherwise). An entry of ``terms`` is a name, or a table ``{name = "...", <options>}``.

A term reads what it needs from the client's context (``reads``); a term added from the config
gets there only what its spec declares it reads from the run: numbers from its options
(:attr:`TermSpec.sends`) and the round's start model (:attr:`TermSpec.anchor`), which the
parameter-sharing protocol adds to every client's context. ``[objective] proximal_mu = x`` is the
``proximal`` term with ``mu = x``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar, cast

import torch
from torch import nn
from torch.func import functional_call

from chillfl.capabilities import Cost
from chillfl.errors import ConfigError, did_you_mean
from chillfl.numeric import is_real
from chillfl.options import NoOptions, parse_options, short_repr
from chillfl.plugins import (Call, Hook, Registry, building, check_calls, check_constructor, check_hooks, check_spec_parts, has_methods, look_up, plugin_names,
                             refuse_bad_registration)

Params = dict[str, torch.Tensor]

Wire = float | torch.Tensor | dict[str, torch.Tensor]
"""What one entry of a message between server and client may hold: a number, a tensor, or a name -> tensor table."""

Context = Mapping[str, Wire]
"""What the local objective's terms read (``mu``, ``correction``, ``moon_prev``, ...), by name; each term
declares the names it reads in ``reads``. Under the vectorised executor a number arrives as a 0-d tensor."""


def read_table(context: Context, key: str) -> Mapping[str, torch.Tensor]:
    """``context[key]`` as a name -> tensor table (a model, a control variate)."""
    value = context[key]
    if not isinstance(value, Mapping):
        raise TypeError(f"context[{key!r}] must be a name -> tensor table, got {type(value).__name__}")
    return value


def read_number(context: Context, key: str) -> float | torch.Tensor:
    """``context[key]`` as a number (a float, or a 0-d tensor under vmap).

    Anything else is a TypeError, as :func:`read_table` and :func:`read_tensor` refuse theirs: a string or a vector
    handed back here reached a typed term as a "number" of any shape."""
    value = context[key]
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        return value
    if is_real(value):
        return value
    what = f"a tensor of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else "a table" if isinstance(value, Mapping) else type(value).__name__
    raise TypeError(f"context[{key!r}] must be a number or a 0-d tensor, got {what}")


def read_tensor(context: Context, key: str) -> torch.Tensor:
    """``context[key]`` as a tensor."""
    value = context[key]
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"context[{key!r}] must be a tensor, got {type(value).__name__}")
    return value




class LossTerm(Protocol):
    """An additive term of the local objective: term(params, context) -> scalar; ``reads`` names its context keys.

    ``reads`` is read-only here (a property) so that a plain class attribute satisfies the protocol: mypy infers
    ``reads = ("a", "b")`` as ``tuple[str, str]``, which a mutable ``tuple[str, ...]`` member (invariant) refused."""

    @property
    def reads(self) -> tuple[str, ...]: ...

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context) -> torch.Tensor:
        ...




@dataclass
class StepView:
    """What a batch term sees of one training step (see :class:`BatchTerm`).

    ``features`` is the model's representation (the input of its classifier head: the one it declares with
    ``head_name()``, else its last ``nn.Linear``; :func:`chillfl.models.parts.head_name`) and ``logits`` its output, both
    of the training forward, so a term's gradient flows through them;
    ``captured`` maps each module a term asked for (``BatchTerm.captures``) to
    its (input, output) in that forward. ``model`` is the step's template
    (run it with ``torch.func.functional_call``); ``buffers`` the client's.
    """

    model: nn.Module
    """The step's template module (parameters come as ``params``: run it with ``torch.func.functional_call``)."""
    x: torch.Tensor
    """The batch's inputs, ``[batch, ...]``."""
    y: torch.Tensor
    """The batch's integer labels, ``[batch]``."""
    features: torch.Tensor
    """The representation, ``[batch, d]`` float: the input of the model's classifier head (:func:`chillfl.models.parts.head_name`) in this forward."""
    logits: torch.Tensor
    """The model's output, ``[batch, num_classes]``, of the same forward (not divided by the temperature)."""
    base_loss: torch.Tensor
    """The scalar base loss of the step (temperature cross-entropy, or the method's own)."""
    buffers: Mapping[str, torch.Tensor]
    """The client's buffers (BatchNorm statistics), by name."""
    captured: Mapping[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    """(input, output) of each module named in the terms' ``captures``, in this forward."""
    head: str | None = None
    """The model's classifier head, looked up once per training (pass it to
    :func:`~chillfl.models.parts.forward_with_features` for a frozen teacher's representation); None: not looked up."""


R = TypeVar("R")


HALF_DTYPES = (torch.float16, torch.bfloat16)
"""The floating dtypes that are raised to float32 where a loss is taken (bf16 autocast's logits); float64 keeps its own."""


def half_to_float(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32 where it is half precision, else ``t`` itself: an unconditional ``.float()`` rounded a float64
    model's logits (and a teacher's) to float32."""
    return t.float() if t.dtype in HALF_DTYPES else t


def frozen_forward(step: StepView, state: Mapping[str, torch.Tensor], run: Callable[[Callable[[torch.Tensor], torch.Tensor]], R]) -> R:
    """``run(call)``, ``call(x)`` being the step's model with ``state`` (parameters and buffers), in eval mode, without gradient.

    A frozen teacher's forward for a batch term (MOON's global and previous models, FedNTD's start model): batch
    norm uses the state's own running statistics and updates nothing, dropout is off, the template's mode is restored.
    """
    model = step.model
    names = {n for n, _ in model.named_parameters()}
    params = {k: v.detach() for k, v in state.items() if k in names}
    buffers = {k: v.detach() for k, v in state.items() if k not in names}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return run(lambda x: functional_call(model, (params, buffers), (x,)))
    finally:
        model.train(was_training)


class BatchTerm(Protocol):
    """A term that reads the step's batch and forward: term(params, context, step) -> scalar.

    MOON, FedAlign and FedGen regularise representations, not parameters, so
    they need the batch. :class:`~chillfl.training.local.StepLoss` tells the
    two kinds apart by ``per_batch`` (True here); ``captures`` names modules
    whose (input, output) the training forward records for the term.
    """

    # read-only members (see LossTerm): ``per_batch = True`` and ``captures = ()`` as plain class attributes satisfy them
    @property
    def per_batch(self) -> bool: ...
    @property
    def captures(self) -> tuple[str, ...]: ...
    @property
    def reads(self) -> tuple[str, ...]: ...

    def __call__(self, params: Mapping[str, torch.Tensor], context: Context, step: StepView) -> torch.Tensor:
        ...


def is_batch_term(term: object) -> bool:
    """Whether ``term`` is a :class:`BatchTerm` (reads the batch) rather than a :class:`LossTerm`."""
    return bool(getattr(term, "per_batch", False))


def term_calls(term: object) -> tuple[Call, ...]:
    """How a step calls ``term`` (:func:`apply_term`), for :func:`~chillfl.plugins.check_calls` on the built term."""
    # a module's own __call__ takes anything and runs its forward; one that overrides __call__ is called as any term
    method = "forward" if isinstance(term, nn.Module) and type(term).__call__ is nn.Module.__call__ else "__call__"
    return ((method, ("params", "context", "step") if is_batch_term(term) else ("params", "context")),)


def check_term(term: object, field: str) -> None:
    """A ConfigError on ``field`` when a step cannot call the built ``term`` as it calls it (:func:`term_calls`).

    Why: an ``nn.Module`` term with no ``forward`` has ``nn.Module``'s, which takes ``*input`` and raises
    NotImplementedError: it passed the check and stopped the run at its first step, leaving NAME.partial."""
    if isinstance(term, nn.Module) and type(term).__call__ is nn.Module.__call__ and type(term).forward is nn.Module.forward:
        raise ConfigError(field, f"{type(term).__name__} is an nn.Module term without forward: define forward(params, context"
                                 f"{', step' if is_batch_term(term) else ''}), which the step calls")
    check_calls(term, term_calls(term), field)


Term = LossTerm | BatchTerm
"""Any additive term of the local objective."""


def apply_term(term: Term, params: Mapping[str, torch.Tensor], context: Context, step: StepView | None, field: str | None = None) -> torch.Tensor:
    """``term``'s value: a batch term gets the step (which the caller builds only when some term needs it).

    A value that is not a scalar is one :class:`TermError` naming the term: added to the loss it broadcast (a
    vector term made the loss a vector) and failed far away, in autograd or a shape check, as a traceback.
    ``field``: the config field that put the term in the run (:meth:`~chillfl.training.local.LocalSpec.term_field`),
    which the error names; None: ``terms``.
    """
    try:
        if is_batch_term(term):
            assert step is not None, "a batch term needs the step's view"
            value = cast(BatchTerm, term)(params, context, step)
        else:
            value = cast(LossTerm, term)(params, context)
    except KeyError as exc:  # a key the term reads from the context without declaring it: a raw KeyError deep in training
        key = exc.args[0] if exc.args else None
        if not isinstance(key, str) or key in context or key in term.reads:
            raise
        raise TermError(f"{type(term).__qualname__} read the context key {key!r}, which it does not declare in its reads and the method "
                        "does not send: declare it in reads (a key the method's context carries)", field or "terms") from None
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise TermError(f"{type(term).__qualname__} returned a tensor of shape {tuple(value.shape)}; a loss term returns a scalar (a 0-d tensor)", field or "terms")
    elif not is_real(value):
        raise TermError(f"{type(term).__qualname__} returned {type(value).__name__}; a loss term returns a scalar (a 0-d tensor)", field or "terms")
    return value


class ContextError(ConfigError):
    """A term reads a context key that the round's context lacks: the method's downlink or client half must put it there.

    A :class:`ConfigError` on the config field that put the term in the run (``objective.terms[1]``, ``terms[0]`` from
    Python, ``algorithm.name`` for a method's own; ``context`` where none is known): a method or term of the run's config
    that does not fit, found when the first client trains; the CLI prints one line and exits 2, like any other misfit.
    """

    def __init__(self, message: str, field: str = "context") -> None:
        super().__init__(field, message)


class TermError(ConfigError):
    """A term's value is not a scalar: a bug in the term (a plugin's, or one of a method's).

    A :class:`ConfigError` on the config field that put the term in the run, as :class:`ContextError` (``terms`` where
    none is known), found at the first training step: the CLI prints one line and exits 2, instead of a traceback from
    autograd in every run of a comparison.
    """

    def __init__(self, message: str, field: str = "terms") -> None:
        super().__init__(field, message)


def check_reads(terms: Sequence[Term], context: Mapping[str, Any], client_id: int, field_of: Callable[[int], str | None] | None = None) -> None:
    """Every key the ``terms`` declare in ``reads`` is in ``context``; else one :class:`ContextError` naming the term and key.

    Checked once per client training (not per step): a missing key is a bug in a method's
    ``downlink``/``ClientHalf.prepare``, best reported before any step, by name. ``field_of``: the config field of the
    term at an index (:meth:`~chillfl.training.local.LocalSpec.term_field`), which the error names; None: ``context``.
    """
    for index, term in enumerate(terms):
        missing = [key for key in term.reads if key not in context]
        if missing:
            have = ", ".join(sorted(map(str, context))) or "nothing"
            raise ContextError(
                f"{type(term).__qualname__} reads context key(s) {', '.join(map(repr, missing))}, which client {client_id}'s context "
                f"lacks (it has: {have}); the aggregator's downlink, its client half's prepare or, for a term of [objective] terms, "
                "its TermSpec's sends must provide them",
                (field_of(index) if field_of is not None else None) or "context",
            )


# ----------------------------------------------------------------------------- terms by name


def _sends_nothing(options: Any) -> Mapping[str, float]:
    return {}


@dataclass(frozen=True)
class TermSpec:
    """A loss term's option dataclass, how to build it, one line about it, and what it reads from the run."""

    options: type
    build: Callable[[Any], Term]
    summary: str
    sends: Callable[[Any], Mapping[str, float]] = _sends_nothing
    """Numbers the term reads from each client's context, from its options (the proximal term's ``mu``)."""
    anchor: str | None = None
    """The context key under which the term reads the round's start model (``global_params``); None: it reads none."""
    cost: Cost = Cost()
    """The work it adds to a local step, for time estimates (a frozen model's forward a step: ``Cost(step_passes=1 + FORWARD)``)."""
    couples_samples: bool = False
    """Whether one sample's value of the term depends on the other samples of its batch (batch statistics: FedDecorr's
    correlation matrix). Per-sample clipping (``dp-sgd``) evaluates the loss one sample at a time, where such a term is
    another term (FedDecorr's is 0 for one sample), so a private run would drop it without a word: ``dp-sgd`` refuses
    it. Not ``per_batch``, which says the term reads the step's batch, as MOON's and FedNTD's per-sample terms do. A term
    class (no TermSpec) declares it in a ``couples_samples`` class attribute."""
    anchor_buffers: bool = True
    """Whether the term reads the anchor's buffers (BN statistics, counters) as well as its parameters: a forward pass on
    it does (NTD's teacher); the proximal term, over the trainable parameters alone, does not. Why: a client is sent
    (priced) the server's values of the entries an anchor reads that it does not hold, and only those. Last, after
    ``cost``: a spec written positionally before the field came keeps its meaning."""

    def calls(self) -> list[Hook]:
        """Each hook the runtime calls: (field, the hook or None, the parameters it is called with), checked where the spec is read."""
        return [("build", self.build, ("options",)), ("sends", self.sends, ("options",))]


_REGISTRY: Registry[TermSpec] = Registry("loss term", package="chillfl.training.term_kinds", modules=("chillfl.training.objective",))
"""The built-in terms, registered by the modules named here (imported on the first lookup)."""

TERM_METHODS = ("__call__",)


def register_term(name: str, spec: TermSpec) -> TermSpec:
    """Name ``spec`` ``name`` (each built-in next to its code; a plugin the same way); a name registered by another module
    is an error, by its own module again replaces (:class:`~chillfl.plugins.Registry`)."""
    refuse_bad_registration(name, spec, TermSpec, "register_term")
    check_spec_parts(name, spec.options, spec.summary, "TermSpec", "objective.terms")
    check_hooks(name, spec.calls(), "objective.terms")  # registered by a plugin module: its hooks checked as a spec named by import path
    return _REGISTRY.register(name, spec)


def registered_terms() -> dict[str, TermSpec]:
    """The registered specs by name (a copy)."""
    return _REGISTRY.specs()


def _is_term_class(obj: Any) -> bool:
    return has_methods(obj, TERM_METHODS) and isinstance(getattr(obj, "reads", None), tuple)


def term_names() -> list[str]:
    """Registered names and the ``chillfl.plugins`` entry points that name a term."""
    return sorted({*registered_terms(), *plugin_names(is_term, registered_terms(), "objective.terms")})


def is_term(obj: Any) -> bool:
    """Whether a plugin's object is a loss term: a :class:`TermSpec` or a term class."""
    return isinstance(obj, TermSpec) or _is_term_class(obj)


def user_term(obj: Any, name: str, field: str) -> TermSpec:
    """A user's object (import path or entry point) as a :class:`TermSpec`, or a ConfigError on ``field``."""
    if isinstance(obj, TermSpec):
        check_spec_parts(name, obj.options, obj.summary, "TermSpec", field)
        check_hooks(name, obj.calls(), field)
        return obj
    if not _is_term_class(obj):
        raise ConfigError(field, f"{name!r} is not a loss term: give a TermSpec, or a class with a `reads` tuple and __call__ (see chillfl.extend.LossTerm, BatchTerm)")
    couples = getattr(obj, "couples_samples", False) is True
    options = getattr(obj, "Options", None)
    if options is None:
        check_constructor(obj, False, name, field)
        return TermSpec(NoOptions, lambda o: obj(), name, couples_samples=couples)
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(field, f"{name!r}: its Options must be a dataclass, got {options!r}")
    check_constructor(obj, True, name, field)
    return TermSpec(options, lambda o: obj(o), name, couples_samples=couples)


def term_spec(name: Any, field: str) -> TermSpec:
    """The registered term ``name``, or a user's (``"pkg.module:Name"``, a ``chillfl.plugins`` entry point)."""
    spec: TermSpec = look_up(name, field, _REGISTRY.view(), is_term, term_names, user_term)
    return spec


@dataclass(frozen=True)
class ObjectiveTerm:
    """One term the config adds: its parsed spec and options, and the config field it came from (for errors)."""

    spec: TermSpec
    options: Any
    field: str
    name: object = ""
    """As the config names it: a plugin's constructor that raises is one line naming it (:func:`~chillfl.plugins.building`)."""

    def build(self) -> Term:
        built_in = isinstance(self.name, str) and _REGISTRY.get(self.name) is self.spec  # one lookup: no import of every term module
        with building(self.name, self.field, built_in, " (called as build(options))"):
            term = self.spec.build(self.options)
        if isinstance(term, type):  # its __call__ is type's: it passed as a term and was built, with the step's arguments, at the first step
            raise ConfigError(self.field, f"{self.name!r}: its TermSpec's build returned the class {term.__name__}, not an instance: call it")
        if not (has_methods(type(term), TERM_METHODS) and isinstance(term.reads if hasattr(term, "reads") else None, tuple)):
            raise ConfigError(self.field, f"{self.name!r}: its TermSpec's build must return a loss term (a `reads` tuple and __call__; "
                                          f"see chillfl.extend.LossTerm), got {short_repr(term)}")  # not an AttributeError mid-training
        return term


class ObjectiveTable(Protocol):
    """What this module reads of ``[objective]`` (:class:`chillfl.config.ObjectiveConfig`, which imports this package)."""

    @property
    def proximal_mu(self) -> float: ...

    @property
    def terms(self) -> Sequence[str | Mapping[str, Any]]: ...


def configured_terms(objective: ObjectiveTable, section: str = "objective") -> list[ObjectiveTerm]:
    """``[objective]``'s terms in order (``proximal_mu`` first, then ``terms``), parsed; a ConfigError names the field."""
    out: list[ObjectiveTerm] = []
    if objective.proximal_mu != 0:
        field = f"{section}.proximal_mu"
        proximal = term_spec("proximal", field)
        out.append(ObjectiveTerm(proximal, parse_options(proximal.options, {"mu": objective.proximal_mu}, field), field, "proximal"))
    for i, entry in enumerate(objective.terms):
        field = entry_field(section, i)
        name, table = (entry, {}) if isinstance(entry, str) else (entry.get("name"), {k: v for k, v in entry.items() if k != "name"})
        spec = term_spec(name, field)
        out.append(ObjectiveTerm(spec, parse_options(spec.options, table, field), field, name))
    check_context(out)
    return out


def entry_field(section: str, index: int) -> str:
    """The config field of entry ``index`` of ``[section] terms`` (``objective.terms[0]``), which its refusals name.

    Why: always the entry, as every other list field is named (``model.assign[0]``, ``model.groups[0]``, ``terms[0]``
    from Python, ``callbacks[0]``); a lone entry was ``objective.terms``, and a refusal of its options
    (``objective.terms.beta``) read as an option of the list, not of its term."""
    return f"{section}.terms[{index}]"


def entry_name(entry: Any) -> Any:
    """The name an entry of ``terms`` gives its term: the entry itself, or its table's ``name`` (None: neither)."""
    return entry if isinstance(entry, str) else entry.get("name") if isinstance(entry, Mapping) else None


def with_term_option(objective: Mapping[str, Any], key: str, value: Any, section: str = "objective") -> list[Any]:
    """``objective``'s ``terms`` with ``key`` = ``objective.terms.<name>.<option>`` set to ``value`` on the term named ``name``.

    Why: a tuning grid (and an override) addresses a config field by its dotted path, and ``terms`` is a list,
    so ``objective.terms.ntd.beta`` could not be a grid key: FedNTD's beta was left at its default while every
    other hyperparameter was tuned on validation. A term is found by the name its entry gives it (``"ntd"``,
    ``{name = "ntd", ...}``, an import path: its option is the part after the key's last dot), never by its
    place in the list, which differs from variant to variant. The option is checked as the term's options
    are (:func:`parse_options`, with the entry's other options), so a bad value fails here, naming ``key``.
    """
    prefix = f"{section}.terms."
    name, _, option = key[len(prefix):].rpartition(".")
    terms = list(objective.get("terms") or ())
    names = [entry_name(e) for e in terms]
    listed = ", ".join(map(str, names)) or "none"
    if not key.startswith(prefix) or not name or not option:
        raise ConfigError(key, f"a term's option is set as {prefix}<term name>.<option>, e.g. {prefix}ntd.beta")
    if option == "name":
        raise ConfigError(key, f"a term's name is not one of its options; a variant that runs another term sets {section}.terms whole")
    if name.isdigit():
        at = int(name) if len(name) < 10 else len(names)
        named = names[at] if at < len(names) and isinstance(names[at], str) else "<term name>"
        raise ConfigError(key, f"a term is addressed by its name, not its place in the list: give {prefix}{named}.{option} (the terms: {listed})")
    where = [i for i, n in enumerate(names) if n == name]
    if not where:
        hint = f"; [{section}] proximal_mu is the proximal term's mu: give {section}.proximal_mu" if name == "proximal" and objective.get("proximal_mu") else ""
        raise ConfigError(key, f"no term {name!r} in this run's {section}.terms{did_you_mean(name, [n for n in names if isinstance(n, str)])} "
                               f"(it has: {listed}){hint}; tune a term's option in the own grid of the variants that have the term "
                               "([variants.LABEL] tune)")
    if len(where) > 1:
        raise ConfigError(key, f"ambiguous: {section}.terms lists {name!r} {len(where)} times (entries {', '.join(map(str, where))}); "
                               "a key by name sets one term: give each its own variant")
    i = where[0]
    spec = term_spec(name, f"{section}.terms")
    entry = terms[i]
    table = {k: v for k, v in entry.items() if k != "name"} if isinstance(entry, Mapping) else {}
    table[option] = value
    parse_options(spec.options, table, f"{prefix}{name}")  # an unknown option lists the term's; a refused value names key
    terms[i] = {"name": name, **table}
    return terms


def check_context(terms: list[ObjectiveTerm]) -> None:
    """Two terms that send the same context key would read each other's value: refused, naming the later one's field."""
    seen: dict[str, tuple[str, str]] = {}  # key -> (what it is, the field of the term that sent it first)
    for term in terms:
        keys = [*term.spec.sends(term.options), *([term.spec.anchor] if term.spec.anchor else [])]
        for key in keys:
            if key in seen and not (term.spec.anchor == key and seen[key][0] == "anchor"):
                raise ConfigError(term.field, f"{term.spec.summary!r} sends context key {key!r}, which the term of {seen[key][1]} sends too; set one of the two")
            seen[key] = ("anchor" if key == term.spec.anchor else "number", term.field)


def context_fields(objective: ObjectiveTable) -> dict[str, tuple[str, str]]:
    """Each context key ``[objective]``'s terms send (their numbers and anchors), with the field and the name of the first
    term that sends it: what a refusal names when the aggregator's downlink sends that key too (the term's value would
    replace the method's)."""
    fields: dict[str, tuple[str, str]] = {}
    for term in configured_terms(objective):
        for key in (*term.spec.sends(term.options), *([term.spec.anchor] if term.spec.anchor else [])):
            fields.setdefault(key, (term.field, str(term.name)))
    return fields


def objective_context(objective: ObjectiveTable) -> tuple[dict[str, float], tuple[str, ...]]:
    """What the parameter-sharing protocol adds to every client's context for ``[objective]``'s terms:
    their numbers (by key) and the keys under which they read the round's start model."""
    numbers: dict[str, float] = {}
    anchors: list[str] = []
    for term in configured_terms(objective):
        numbers.update(term.spec.sends(term.options))
        if term.spec.anchor is not None and term.spec.anchor not in anchors:
            anchors.append(term.spec.anchor)
    return numbers, tuple(anchors)


def anchor_reads_buffers(objective: ObjectiveTable) -> bool:
    """Whether one of ``[objective]``'s terms reads the buffers of the round's start model (:attr:`TermSpec.anchor_buffers`);
    False when none does, or none reads the model: the parameter-sharing protocol then prices only its parameters."""
    return any(term.spec.anchor is not None and term.spec.anchor_buffers for term in configured_terms(objective))

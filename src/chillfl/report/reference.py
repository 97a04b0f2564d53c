"""The configuration reference, generated from the registries themselves.

Every pluggable part declares its options as a dataclass; rendering those
dataclasses means the reference cannot drift from the code
(``tests/test_reference.py`` checks ``docs/reference.md`` is current).
Regenerate with ``chillfl list --options > docs/reference.md``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import importlib
import logging
import re
import textwrap
import types
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Iterator, Mapping, Protocol, Sequence, TypeVar

from chillfl.aggregation.registry import AlgorithmSpec, algorithm_names, algorithm_spec
from chillfl.capabilities import TakesName
from chillfl.config import DEVICE_CHOICES, EXECUTORS, RunConfig
from chillfl.errors import ConfigError, did_you_mean
from chillfl.experiment import base_losses
from chillfl.data.augment import AugmentOptions
from chillfl.data.datasets import dataset_names, dataset_spec
from chillfl.data.partition import partitioner_names, partitioner_spec
from chillfl.data.partition_file import FROM_KEY, PARTITION_FILE
from chillfl.models.projection import EveryModelOptions
from chillfl.models.registry import model_names, model_spec
from chillfl.once import warn_once
from chillfl.options import NoOptions, OwnTable
from chillfl import plugins as plugins_module
from chillfl.plugins import is_import_path
from chillfl.settings.attack import AttackOptions, attack_spec, kind_names
from chillfl.settings.distillation import DistillationOptions, method_settings
from chillfl.settings.distillation import method_names as soft_label_method_names
from chillfl.settings.privacy import PrivacyOptions, mechanism_names, mechanism_spec
from chillfl.settings.prototypes import method_names as prototype_method_names
from chillfl.settings.prototypes import method_spec
from chillfl.temperature import policy_names, policy_spec
from chillfl.temperature.registry import PolicySpec
from chillfl.tune import SELECT_RULES

if TYPE_CHECKING:  # annotations only (the terms module is imported where the terms are listed)
    from chillfl.training.terms import TermSpec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Part:
    """One pluggable part of a config: its table, the key that names it, its names and how to look one up."""

    section: str
    key: str
    names: Callable[[], Iterable[str]]
    spec_of: Callable[[str], Any]
    """A name's spec or options entry (a ConfigError for what it cannot find: how a plugin path is claimed)."""
    plugins: bool = False
    """Whether a user's import path may name one (then ``list --options PATH`` shows it under this part)."""


PARTS: tuple[Part, ...] = (
    Part("dataset", "name", dataset_names, dataset_spec, plugins=True),
    Part("partition", "name", partitioner_names, partitioner_spec, plugins=True),
    Part("model", "name", model_names, model_spec, plugins=True),
    Part("temperature", "policy", policy_names, policy_spec, plugins=True),
    Part("algorithm", "name", algorithm_names, algorithm_spec, plugins=True),
    Part("distillation", "method", soft_label_method_names, method_settings, plugins=True),
    Part("prototypes", "method", prototype_method_names, method_spec, plugins=True),
    Part("attack", "kind", kind_names, attack_spec, plugins=True),
    Part("privacy", "mechanism", mechanism_names, mechanism_spec, plugins=True),
)
"""Every part, by its registry's public names function and lookup; those that take plugins list the
``chillfl.plugins`` entry points that belong to them too, so plugin options are shown."""


SUBTABLES: tuple[tuple[str, type], ...] = (("dataset.augment", AugmentOptions),)
"""Option tables nested in a part's table, whatever its name (rendered after the parts)."""

COMPARISON_TABLES = ("variants", "compare", "tune")
"""A comparison's tables: plain dicts, read by the comparison (``chillfl.sweeps``), with no options dataclass to list."""
COMPARISON_NOTE = (
    "Read by `chillfl compare` (and `chillfl run` of a config that has them): `[variants.LABEL]` tables of overrides, "
    "one row each; `[compare]` options (below); `[tune]`: `\"section.option\" = [values]`, each variant keeping its best "
    "point on `eval.validation`. Empty in a single run. See [configuration.md](configuration.md) and "
    "[comparisons.md](comparisons.md)."
)
COMPARE_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("reference", "str", "unset", "a variant's label (unset: the highest fixed T, else the first variant)"),
    ("baseline", "str", "unset", "a variant's label (unset: the T = 1 variant, else the first)"),
    ("seeds", "list[int]", "unset", "seeds >= 0 (unset: the config's `seed` alone)"),
    ("controls", "bool", "false", "`true`, `false`"),
    ("select", "str", '"final"', ", ".join(f"`{rule}`" for rule in SELECT_RULES)),
    ("local", "bool", "false", "`true`, `false`"),
)
"""``[compare]``'s options as the reference lists them (one row per :data:`~chillfl.config.COMPARE_KEYS` entry)."""


def _comparison_section() -> list[str]:
    """``[variants]``, ``[compare]`` and ``[tune]``: they were in no listing, so ``list --options compare`` called compare no part."""
    rows = [_row(key, type_name, default, allowed) for key, type_name, default, allowed in COMPARE_ROWS]
    return ["", "## [variants], [compare], [tune] — a comparison's tables", "", *_paragraph(COMPARISON_NOTE), "",
            "`[compare]`:", "", "| option | type | default | allowed |", "|---|---|---|---|", *rows]


def _registries(plugins: Sequence[str] = (), terms: Collection[str] = ()) -> Iterator[tuple[str, str, Mapping[str, Any]]]:
    """(section, name key, name -> spec) of every part, with ``plugins`` (import paths) under the parts that claim them;
    a path among ``terms`` (the loss terms' names, shown under ``[objective] terms``) is claimed already. A path no part
    claims is a ConfigError that says why each part refused it (:func:`refusals`)."""
    claimed = {path for path in plugins if path in terms}
    refused: dict[str, dict[str, str]] = {path: {} for path in plugins}  # path -> each refusing part's field -> why
    known = list(terms)  # every name a part or term has: the closest one to a typo is suggested
    for part in PARTS:
        registry = _listed(part.names(), part.spec_of, f"[{part.section}]", plugins)
        known += registry
        if not part.plugins:
            yield part.section, part.key, registry
            continue
        for path in plugins:
            try:
                registry[path] = part.spec_of(path)
            except ConfigError as exc:
                refused[path][exc.field] = exc.message
                continue
            claimed.add(path)
        yield part.section, part.key, registry
    for path in plugins:
        if path not in claimed:
            kinds = "dataset, partitioner, model, algorithm, temperature policy, soft-label or prototype method, attack, privacy mechanism or loss term"
            hint = ""
            if is_import_path(path) or path in plugins_module.entry_points():  # an object each part refused: why, by part
                why = refusals(path, {**refused[path], **_term_refusal(path)})
            else:  # a name no part knows: the first part's "allowed: <its names>" read as if only those were
                why = "give a plugin's import path 'pkg.module:Name' or a chillfl.plugins entry point's name; `chillfl list` names every part's"
                hint = did_you_mean(path, _suggestible(known))
            raise ConfigError("list.options", f"{path!r}{hint} is no {kinds} ({why})")


Spec = TypeVar("Spec")


def _listed(names: Iterable[str], spec_of: Callable[[str], Spec], where: str, asked: Collection[str] = ()) -> dict[str, Spec]:
    """Each of a part's ``names`` with its spec. An installed entry point whose object the part's test accepts (it is
    listed under the part) but whose spec cannot be read (an aggregator class built with arguments its ``__init__``
    does not take) is left out, with one warning line naming it and why: its error stopped the whole listing. One
    that the command asks for by name (``asked``) is left out quietly: the refusal, part by part, says why
    (:func:`refusals`). A built-in that cannot be read is a bug, and raises."""
    entries = plugins_module.entry_points()
    out: dict[str, Spec] = {}
    for name in names:
        try:
            out[name] = spec_of(name)
        except ConfigError as exc:
            if name not in entries:
                raise
            if name not in asked:
                warn_once(log, f"plugin {name!r} ({entries[name]}) is left out of {where}: {exc.message}")
    return out


def _term_refusal(path: str) -> dict[str, str]:
    """Why the loss terms refuse ``path`` (a path :func:`_terms` left out), as ``{field: why}``."""
    from chillfl.training.terms import term_spec

    try:
        term_spec(path, "objective.terms")
    except ConfigError as exc:
        return {exc.field: exc.message}
    return {}


def refusals(path: str, why: Mapping[str, str]) -> str:
    """Why each part refused the import path (or entry point's name) ``path``, in one line: ``field: reason; ...``, each reason without the
    path it starts with. Only the first part's reason was shown, so a model class whose build took the wrong
    arguments read "must name a dataset"; one reason that every part gave (the module does not import) is said once."""
    def short(reason: str) -> str:
        return reason.removeprefix(repr(path)).removeprefix(":").strip() or reason

    reasons = {field: short(reason) for field, reason in why.items()}
    if len(set(reasons.values())) == 1:
        return next(iter(reasons.values()))
    return "; ".join(f"{field}: {reason}" for field, reason in reasons.items())


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        return _shown(field.default)
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return _shown(field.default_factory())  # type: ignore[misc]
    return "(required)"


def _shown(value: Any) -> str:
    """A default as written in TOML (``true``, ``"ratio"``, ``[]``); ``None`` (no TOML spelling) as ``unset``."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_shown(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _first_line(obj: Any) -> str:
    """The first line of ``obj``'s docstring; none for a dataclass without one of its own, whose ``__doc__`` the
    dataclass decorator fills with its signature (``Options(a: int = 1, ...)``: shown as a plugin's summary)."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    if dataclasses.is_dataclass(obj) and isinstance(obj, type) and doc.startswith(f"{obj.__name__}("):
        return ""
    return _no_roles(doc.splitlines()[0]) if doc else ""


def _first_paragraph(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring (its lines up to the first blank one, joined): a sentence of it may wrap."""
    if not _first_line(obj):
        return ""
    lines = inspect.cleandoc(obj.__doc__).split("\n\n")[0].splitlines()
    return _no_roles(" ".join(line.strip() for line in lines))


PARAGRAPH_WIDTH = 100
"""Where the reference's prose lines wrap: ``chillfl list --options ditto`` printed the 57 algorithm names as one line of
600 characters. Markdown joins a paragraph's lines, so the page renders as before; headings and table rows stay whole."""


def _paragraph(text: str) -> list[str]:
    """``text`` as the lines of one markdown paragraph at most :data:`PARAGRAPH_WIDTH` wide (a name is never split)."""
    return textwrap.wrap(text, PARAGRAPH_WIDTH, break_long_words=False, break_on_hyphens=False) or [text]


def _names(module: str, function: str) -> Callable[[], list[str]]:
    """A registry's names, looked up when the reference is rendered (an absent module gives none)."""

    def names() -> list[str]:
        try:
            return sorted(getattr(importlib.import_module(module), function)())
        except (ModuleNotFoundError, AttributeError):
            return []

    return names


def _losses() -> list[str]:
    return sorted(base_losses())


def _executors() -> list[str]:
    return list(EXECUTORS)


ENUMERATED: dict[str, TakesName] = {
    "executor": TakesName(_executors),
    "device": TakesName(lambda: list(DEVICE_CHOICES)),  # not mps: every run refuses it
    "client.loss": TakesName(_losses),
    "distillation.public_dataset": TakesName(_names("chillfl.data", "dataset_names"), "dataset"),
    "distillation.method": TakesName(_names("chillfl.settings.distillation", "method_names"), "distillation"),
}
"""The run's own options that are plain strings in their dataclass but take one of a registry's names ("section.option"),
and of which part they take a user's import path too (:attr:`TakesName.part`). Why: ``chillfl list --options
my_module:METHOD`` listed the method under its part, but not among the names an option that takes a method allows.
A part's implementation declares its own such options on its spec (:func:`takes_names`), a plugin's as a built-in's."""

Claimed = Mapping[str, Sequence[str]]
"""Part section -> the import paths that part claims in this listing (``chillfl list --options pkg.module:Name``)."""


def takes_names(spec: object) -> Mapping[str, TakesName]:
    """The options a part's spec declares to take a registry's name (:attr:`AlgorithmSpec.takes_names`,
    :attr:`PolicySpec.takes_names`); none for the parts whose specs declare none."""
    return spec.takes_names if isinstance(spec, (AlgorithmSpec, PolicySpec)) else {}


def enumerated_options(plugins: Sequence[str] = ()) -> dict[str, TakesName]:
    """Every option the reference lists a registry's names for, by ``section[.name].option``: :data:`ENUMERATED` and
    what each registered spec declares (the ``chillfl.plugins`` entry points' and ``plugins``' too)."""
    out = dict(ENUMERATED)
    for section, _, registry in _registries(plugins):
        for name, spec in registry.items():
            out.update({f"{section}.{name}.{option}": takes for option, takes in takes_names(spec).items()})
    return out


def _allowed_names(takes: TakesName, claimed: Claimed) -> list[str]:
    """The names an option that takes a name allows: its registry's, and the import paths of ``claimed`` it takes (:attr:`TakesName.part`)."""
    values = takes.names()
    paths = claimed.get(takes.part, ()) if takes.part is not None else ()
    if not paths:
        return values
    return list(dict.fromkeys([*values, *takes.paths(paths)]))  # weighted_bases repeats the registry's names


def _type_and_allowed(tp: Any, takes: TakesName | None, claimed: Claimed = types.MappingProxyType({})) -> tuple[str, str]:
    """(type shown, allowed values shown) of an option's resolved annotation ``tp`` (``takes``: the registry whose name it
    takes, if any; ``claimed``: the listing's import paths, by part)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if takes is not None:
        values = _allowed_names(takes, claimed)
        optional = origin in (typing.Union, types.UnionType) and type(None) in args
        return ("str | None" if optional else "str"), ", ".join(f"`{v}`" for v in values) + (" (or none)" if optional else "")
    if origin is typing.Literal:
        return _type_name(type(args[0])), ", ".join(f"`{a}`" for a in args)
    if origin in (list, tuple) and args and typing.get_origin(args[0]) is typing.Literal:
        return "list", "any of " + ", ".join(f"`{a}`" for a in typing.get_args(args[0]))
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1 and typing.get_origin(inner[0]) is typing.Literal:
            return _type_name(type(typing.get_args(inner[0])[0])) + " | None", ", ".join(f"`{a}`" for a in typing.get_args(inner[0])) + " (or none)"
        return " | ".join(_type_name(a) for a in args), ""
    if tp is bool:
        return "bool", "`true`, `false`"
    return _type_name(tp), ""


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "None"
    if typing.get_origin(tp) is not None:
        return str(tp).replace("typing.", "")
    return getattr(tp, "__name__", str(tp))


def options_table(cls: type, where: str, claimed: Claimed = types.MappingProxyType({}), takes: Mapping[str, TakesName] = types.MappingProxyType({})) -> list[str]:
    """Markdown rows for dataclass ``cls``: option, type, default, allowed values (``where``: ``section[.name]``;
    ``claimed``: the import paths each part claims in this listing, allowed where an option takes them; ``takes``: the
    options its spec declares to take a registry's name, by option, besides :data:`ENUMERATED`'s)."""
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]  # type: ignore[arg-type]
    if not fields:
        return ["No options."]
    lines = ["", "| option | type | default | allowed |", "|---|---|---|---|"]
    for f in fields:
        type_name, allowed = _type_and_allowed(hints[f.name], takes.get(f.name) or ENUMERATED.get(f"{where}.{f.name}"), claimed)
        lines.append(_row(f.name, type_name, _default(f), allowed))
    return lines + _option_docs(cls, [f.name for f in fields])


def attribute_docs(cls: type) -> dict[str, str]:
    """Option -> the first paragraph of its attribute docstring (the string under it in the class body), for the listing
    beneath its table: ``[client]``'s ``batch_size = 1`` caveat was in the source alone. Python keeps no such docstring at
    run time, so the source is read (parsed, never run); a class whose source cannot be read (one made in a REPL) has none."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):  # a subclass's own docstring replaces its base's
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for node, after in zip(body, body[1:]):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
                first = inspect.cleandoc(after.value.value).split("\n\n")[0]
                docs[node.target.id] = _markdown(" ".join(line.strip() for line in first.splitlines()))
    return docs


def _no_roles(text: str) -> str:
    """A docstring's reST roles as literals: ``:func:`~a.b``` as ````a.b````. Why: the summaries and first paragraphs
    kept them, so the reference page (and ``chillfl list``) showed ``:mod:`chillfl.sinks``` as text."""
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"``\1``", text)


def _markdown(text: str) -> str:
    """A docstring's reST as markdown: ````x```` and ``:func:`x``` as ```x```."""
    return re.sub(r"``([^`]+)``", r"`\1`", _no_roles(text))


def _option_docs(cls: type, names: Sequence[str]) -> list[str]:
    """Under a table: a markdown list of its options that have a docstring, wrapped as the reference's paragraphs."""
    docs = attribute_docs(cls)
    listed = [line for name in names if name in docs
              for line in textwrap.wrap(f"`{name}`: {docs[name]}", PARAGRAPH_WIDTH, initial_indent="- ", subsequent_indent="  ",
                                        break_long_words=False, break_on_hyphens=False)]
    return ["", *listed] if listed else []


def _row(name: str, type_name: str, default: str, allowed: str) -> str:
    """One table row; ``|`` inside a cell is escaped, or GitHub's markdown would split the cell."""
    cells = [f"`{name}`", f"`{type_name}`", f"`{default}`", allowed]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _run_sections() -> Iterator[tuple[str, type, str]]:
    """(heading, dataclass, field prefix) of the fixed parts of a run config."""
    hints = typing.get_type_hints(RunConfig)
    for f in dataclasses.fields(RunConfig):
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp) and not issubclass(tp, OwnTable):  # a table that parses itself is a part (PARTS)
            yield f"[{f.name}]", tp, f.name


def _top_level_rows() -> list[str]:
    hints = typing.get_type_hints(RunConfig)
    lines = ["", "| option | type | default | allowed |", "|---|---|---|---|"]
    for f in dataclasses.fields(RunConfig):
        tp = hints[f.name]
        if (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or typing.get_origin(tp) is dict:
            continue
        type_name, allowed = _type_and_allowed(tp, ENUMERATED.get(f.name))
        lines.append(_row(f.name, type_name, _default(f), allowed))
    return lines


def render_reference(plugins: Sequence[str] = (), *, only: Collection[str] | None = None) -> str:
    """Markdown: the run's own sections, then every part's registered names and each one's options.

    Plugins registered under the ``chillfl.plugins`` entry points are listed under their parts, and so is
    each import path in ``plugins`` (``"pkg.module:Name"``: a plugin on ``sys.path`` without an entry point).
    ``only`` (``chillfl list --options ditto client``) keeps just those: a part's name (with its part's shared
    options), a plugin's path or entry point, or a section (``client``, ``privacy``: the whole table). A name
    that is none of these is a ConfigError, as for ``plugins``.
    """
    keep = _Keep(only)
    lines = [] if keep.some else [
        "# Configuration reference (generated)",
        "",
        *_paragraph("Generated by `chillfl list --options` from the options dataclasses and registries; do not edit by hand "
                    "(`tests/test_reference.py` checks it is current). *allowed* lists every accepted value of an enumerated option."),
        "",
        "## Top-level options",
        *_top_level_rows(),
    ]
    for heading, cls, prefix in _run_sections():
        if keep.section(prefix):
            summary = _first_line(cls)
            lines += ["", f"## {heading}" + (f" — {summary}" if summary else ""), *options_table(cls, prefix)]
    if any(keep.section(table) for table in COMPARISON_TABLES):
        lines += _comparison_section()
    if not keep.some:
        lines += [
            "",
            "## Pluggable parts",
            "",
            *_paragraph("Each part is a TOML table: its name key selects the implementation and the other keys are that implementation's options."),
        ]
    terms = _terms(keep.plugins(plugins))
    paths = keep.plugins(plugins)
    parts = list(_registries(paths, terms))  # every part first: an option of one part may take another's paths (public_dataset)
    claimed = {section: [path for path in paths if path in registry] for section, _, registry in parts}
    for section, key, registry in parts:
        names = [name for name in sorted(registry) if keep.entry(section, name)]
        if not names:
            continue
        lines += ["", f"## [{section}] {key} = ...", "", *_paragraph(f"`{key}`: one of " + ", ".join(f"`{n}`" for n in sorted(registry)) + ".")]
        if section in INSTEAD_OF_A_NAME and keep.section(section):
            lines += ["", *_paragraph(INSTEAD_OF_A_NAME[section])]
        if section in SHARED:
            lines += _shared(section, SHARED[section], claimed)
        for name in names:
            spec = registry[name]
            summary = _summary(name, spec)
            lines += ["", f"### `{name}`" + (f" — {summary}" if summary else ""), *_options_line(spec, summary)]
            lines += options_table(spec.options, f"{section}.{name}", claimed, takes_names(spec))
    for section, options in SUBTABLES:
        if keep.section(section) or keep.section(section.split(".")[0]):
            lines += ["", f"## [{section}]", "", *_paragraph(_first_line(options)), *options_table(options, section)]
    shown = {name: spec for name, spec in terms.items() if keep.entry("objective", name)}
    text = "\n".join(lines + (_term_sections(shown) if shown else []))
    return (text.lstrip("\n") if keep.some else text) + "\n"


def summaries(section: str) -> list[tuple[str, str]]:
    """(name, one-line summary) of every registered entry of a part (``algorithm``, ``attack``, ...; ``objective``: the
    loss terms), the ``chillfl.plugins`` entry points' included: what ``chillfl list methods`` prints, one a line."""
    if section == "objective":
        registry: Mapping[str, Any] = _terms()
    else:
        part = next(p for p in PARTS if p.section == section)
        registry = _listed(part.names(), part.spec_of, f"[{part.section}]", ())
    return [(name, _summary(name, registry[name])) for name in sorted(registry)]


class _Summarised(Protocol):
    """What every part's spec has (the listings read nothing else of it)."""

    @property
    def summary(self) -> str: ...

    @property
    def options(self) -> type: ...


def _options_line(spec: _Summarised, summary: str) -> list[str]:
    """Under an entry's heading: its options' docstring's first line, where the spec's own summary took its place in the
    heading and there are options for it to explain (a paragraph; none otherwise)."""
    said = _first_paragraph(spec.options) if spec.summary else ""
    has_options = dataclasses.is_dataclass(spec.options) and bool(dataclasses.fields(spec.options))
    return ["", *_paragraph(said)] if said and said != summary and has_options else []


def _summary(name: str, spec: _Summarised) -> str:
    """A spec's one-line summary: its ``summary``, else the docstring's first line of the class or function a plugin
    name gives (:func:`_plugin_doc`), else its options' (not :class:`NoOptions`', which says what any part without
    options is, not what this one does); for a plugin class summarised by its own name, its docstring's or none."""
    if spec.summary == name:  # a plugin class without a spec of its own is summarised by its import path
        return _plugin_doc(name)
    return spec.summary or _plugin_doc(name) or ("" if spec.options is NoOptions else _first_line(spec.options))


def _plugin_doc(name: str) -> str:
    """The first line of the docstring of the class or function that plugin ``name`` (an import path, an entry point)
    gives; none for a built-in name, a spec, or an object without a docstring of its own (a dataclass's generated one
    included, :func:`_first_line`). Why: a plugin function's docstring was its summary (a dataset's), a class's never
    was, and ``chillfl list --options`` showed an aggregator, policy, model or term class with none."""
    if not (is_import_path(name) or name in plugins_module.entry_points()):
        return ""
    try:
        obj = plugins_module.resolve(name, "name")
    except ConfigError:  # listed apart as unusable, with why (chillfl list)
        return ""
    return _first_line(obj) if isinstance(obj, type) or inspect.isfunction(obj) else ""


class _Keep:
    """Which sections and entries ``render_reference(only=...)`` shows: all of them when ``only`` is None."""

    def __init__(self, only: Collection[str] | None) -> None:
        self.some = only is not None
        asked = [name.strip("[]") for name in only or ()]
        self.sections = {name for name in asked if name in _section_names()}
        self.names = set(asked) - self.sections

    def plugins(self, plugins: Sequence[str]) -> list[str]:
        """The names to look up among the parts (what is not a section), beside ``plugins``."""
        return list(dict.fromkeys([*plugins, *sorted(self.names)]))

    def section(self, section: str) -> bool:
        return not self.some or section in self.sections

    def entry(self, section: str, name: str) -> bool:
        return self.section(section) or name in self.names


def _suggestible(names: Iterable[str]) -> list[str]:
    """What a typo in ``list --options NAME`` may be suggested: the parts' names and the tables (``clinet`` -> ``client``,
    not ``lie``), less ``none``: the name of each part's "off" value (``nonexist`` was asked if it meant ``none``)."""
    return sorted((set(names) | _section_names()) - {"none"})


def _section_names() -> set[str]:
    """Every table a config has: the run's own, each part's, ``objective`` (its terms) and the subtables."""
    return {prefix for _, _, prefix in _run_sections()} | {part.section for part in PARTS} | {"objective"} | {s for s, _ in SUBTABLES} | set(COMPARISON_TABLES)


def _terms(plugins: Sequence[str] = ()) -> dict[str, TermSpec]:
    """Every loss term by name (registered, and the ``chillfl.plugins`` entry points that name one, as ``chillfl list``
    shows them), with each import path of ``plugins`` that names a term: a term is a plugin like any other part."""
    from chillfl.training.terms import term_names, term_spec

    registry: dict[str, TermSpec] = _listed(term_names(), lambda name: term_spec(name, "objective.terms"), "[objective] terms", plugins)
    for path in plugins:
        try:
            registry[path] = term_spec(path, "objective.terms")
        except ConfigError:
            continue
    return registry


def _term_sections(terms: Mapping[str, TermSpec]) -> list[str]:
    """The loss terms of ``[objective] terms`` and each one's options (an entry is a name, or a table
    ``{name = "...", <options>}``): they were missing here, so a term's options (FedNTD's ``beta``, ``tau``) were nowhere."""
    lines = ["", "## [objective] terms = [...]", "",
             *_paragraph("Each entry: a term's name, or `{name = \"...\", <its options>}`; `proximal_mu = x` is `{name = \"proximal\", mu = x}`.")]
    for name, spec in sorted(terms.items()):
        summary = spec.summary if spec.summary != name else _plugin_doc(name)  # a term class's spec is summarised by its import path
        lines += ["", f"### `{name}`" + (f" — {summary}" if summary else ""), *options_table(spec.options, f"objective.terms.{name}")]
    return lines


SHARED: dict[str, tuple[type, str]] = {
    "model": (EveryModelOptions, "model"),
    "distillation": (DistillationOptions, "method"),
    "attack": (AttackOptions, "kind"),
    "privacy": (PrivacyOptions, "mechanism"),
}
"""Parts whose table holds options every implementation shares (this dataclass; what one is called) beside the chosen one's own."""


INSTEAD_OF_A_NAME = {
    "partition": f"Or `{FROM_KEY} = \"results/RUN/{PARTITION_FILE}\"` alone, without `name`: every client's rows as a finished run wrote"
    f" them, read back and checked against this run (docs/data.md).",
}
"""Parts whose table may, instead of naming an implementation, hold one other key (the partition a run wrote)."""


def _shared(section: str, shared: tuple[type, str], claimed: Claimed = types.MappingProxyType({})) -> list[str]:
    """The options every implementation of ``section`` takes, next to each one's own."""
    options, noun = shared
    return ["", f"### Shared options (every {noun})", "", *_paragraph(_first_line(options)), *options_table(options, section, claimed)]

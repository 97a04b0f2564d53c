"""Typed option tables.

Every pluggable component (dataset, partitioner, model, temperature policy,
algorithm, ...) declares its options as a frozen dataclass and parses its TOML
table with :func:`parse_options`. Unknown keys and wrongly typed values raise
:class:`~chillfl.errors.ConfigError` naming ``section.key``, so a typo fails at
start-up instead of silently using a default.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import os
import re
import types
import typing
import unicodedata
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Annotated, Any, Protocol, TypeAlias, TypeVar

from chillfl.errors import ConfigError, did_you_mean
from chillfl.numeric import is_finite_real, is_real, is_whole
from chillfl.once import warn_once

T = TypeVar("T")
Table = TypeVar("Table", bound="OwnTable")

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
"""Every integer option fits in int64: numpy and torch take them as C integers."""
GIB = 2**30
FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32 (``torch.finfo(torch.float32).max``): the dtype the models compute in."""


@dataclasses.dataclass(frozen=True)
class AtMost:
    """A bound on a float option's size, declared in its annotation (``x: Annotated[float, AtMost(...)]``, or
    :data:`Scale`) and checked by :func:`parse_options` on the value read, naming the field. Why declared: some fifty
    weights and scales took 1e308, each one ``require`` away from a bound, and a bound beside the type cannot be
    forgotten in the option's ``validate``. ``why``: what the bound protects, for the message."""

    largest: float
    why: str


Scale: TypeAlias = Annotated[float, AtMost(FLOAT32_MAX, "the largest float32, the dtype the model computes in: a weight or scale past it "
                                                        "overflows the loss, gradient, weights or noise it multiplies")]
"""A float option that multiplies a loss, a gradient, the weights or noise: its size is bounded at float32's largest, as
learning rates are (``experiment.check_step_sizes``). Past it the run wrote a folder and ended "diverged" (exit 3) in
round 1, where a config error is due; below it a large value is a study's own choice (and may diverge, as it would)."""

FLOAT64_MAX = 1.7976931348623157e308
"""The largest float64 (``sys.float_info.max``): past it a Python float computation raises or gives inf."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


class OwnTable:
    """A config table that parses itself, because which keys it takes depends on a choice made inside it.

    ``[attack]`` is one flat table: ``kind`` picks the attack, and the keys beside it are the shared
    options plus that kind's own, so no single dataclass's fields can describe it. :func:`coerce` hands
    such a table to :meth:`from_table`, and the config writes it back with :meth:`table` (flat, as read).
    """

    @classmethod
    def from_table(cls: type[Table], table: Mapping[str, Any], section: str) -> Table:
        """The table parsed and checked; one ConfigError naming ``section.key`` for any mistake."""
        raise NotImplementedError

    def table(self) -> dict[str, Any]:
        """The flat TOML table that :meth:`from_table` reads back into an equal object (every default written)."""
        raise NotImplementedError


def plain(value: Any) -> Any:
    """A NumPy scalar or array as the Python value it holds (``np.int64(1)`` -> 1, ``np.arange(2)`` -> [0, 1]), also
    inside lists, tuples and dicts (each kept its kind), else ``value`` itself: a notebook's loop over a NumPy array
    hands those over, and ``seed: expected an integer, got np.int64(1)`` refused the integer it was;
    ``list(np.arange(1, 3))`` (a list of NumPy scalars) reached the TOML writer, which raised a raw TypeError."""
    if type(value).__module__ == "numpy" and callable(getattr(value, "tolist", None)):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        items = [plain(v) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value  # nothing to convert: the same object (a caller may compare identities)
        return tuple(items) if isinstance(value, tuple) else items
    if isinstance(value, dict):
        table = {k: plain(v) for k, v in value.items()}
        return value if all(table[k] is v for k, v in value.items()) else table
    return value


def coerce(value: Any, tp: Any, field: str) -> Any:
    """Check ``value`` against annotation ``tp`` (basic types, Optional, unions, tuples, lists, dicts)."""
    value = plain(value)
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(value, arg, field)
            except ConfigError as exc:
                errors.append(exc)
        allowed = " or ".join(_type_name(a) for a in args if a is not type(None))
        raise ConfigError(field, errors[0].message if len(errors) == 1 else f"expected {allowed}, got {short_repr(value)}")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(field, f"unknown value {short_repr(value)}{did_you_mean(value, choices)}; allowed: {', '.join(map(str, choices))}")
        return value
    if tp in (list, tuple):  # a bare ``list`` annotation: a list of anything, still a list (it has no origin to match below)
        origin = tp
    if origin in (list, tuple):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(field, f"expected a list, got {short_repr(value)}")
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [coerce(v, inner, field) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(field, f"expected a table, got {short_repr(value)}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(field, f"expected true or false, got {short_repr(value)}")
    if tp is float:
        if not is_real(value):
            raise ConfigError(field, f"expected a number, got {short_repr(value)}")
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):  # inf/NaN pass every `x > 0` style range check, or fail it silently
            raise ConfigError(field, f"must be a finite number, got {short_repr(value)}")
        return number + 0.0  # -0.0 is 0.0: it passes every `x >= 0` check, and numpy refuses it as a scale (normal(0, -0.0))
    if tp is int:
        if not (is_whole(value) or (isinstance(value, float) and value.is_integer())):
            raise ConfigError(field, f"expected an integer, got {short_repr(value)}")
        number = int(value)
        if not INT64_MIN <= number <= INT64_MAX:  # a float this large (1e30) was written as a number, not an integer: say so
            wanted = "expected an integer" if isinstance(value, float) else "must fit in 64 bits (|x| < 2**63)"
            raise ConfigError(field, f"{wanted}, got {short_repr(value)}")
        return number
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(field, f"expected a string, got {short_repr(value)}")
        if "\0" in value:  # paths and names with NUL raise deep inside the OS layer
            raise ConfigError(field, f"must not contain NUL characters, got {short_repr(value)}")
        return value
    if isinstance(tp, type) and issubclass(tp, OwnTable):
        if not isinstance(value, Mapping):
            raise ConfigError(field, f"expected a table, got {short_repr(value)}")
        return tp.from_table(value, field)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(field, f"expected a table, got {short_repr(value)}")
        return parse_options(tp, value, field)
    return value


def short_repr(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, so a 10**400 or a 1 MB string gives a readable error."""
    if is_whole(value) and abs(value) >= 10**30:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_path(path: str, limit: int = 80) -> str:
    """``repr(path)`` cut in the middle to about ``limit`` characters, keeping its file name whole: an error line about a
    long path cut at its end (:func:`short_repr`) lost the one part that names the file. A last part longer than any
    file name (a pasted text, not a path) is cut as :func:`short_repr` cuts it."""
    text = repr(path)
    if len(text) <= limit:
        return text
    tail = text[text.rfind("/"):]
    if "/" not in text or len(tail) > 260:  # a bare name is all tail; NAME_MAX is 255 bytes
        return short_repr(path, limit)
    return text[: max(limit - 3 - len(tail), 10)] + "..." + tail


def comma_items(text: str, field: str, expected: str) -> list[str]:
    """The stripped items of a comma-separated flag value (``--seeds 0,1,2``); none for a blank ``text``. A comma inside
    brackets, braces or quotes is the item's own (``[64,64],[128]``: two items).

    An empty item (``0,,1``, a trailing comma) is a ConfigError on ``field``: such items were dropped without a word,
    so ``0,,1`` ran as ``0,1`` and a value lost in editing went unnoticed. ``expected``: what the flag takes, e.g.
    ``"integers like 0,1,2 or 0-4"``.
    """
    if not text.strip():
        return []
    items = [item.strip() for item in _top_level_split(text)]
    if "" in items:
        raise ConfigError(field, f"an empty item in {short_repr(text)}; expected {expected}")
    return items


def _top_level_split(text: str) -> list[str]:
    """``text`` split at its commas outside brackets, braces and quotes: ``--grid model.hidden=[64,64],[128]`` sweeps
    two lists (a comma inside a TOML list, inline table or string belongs to the value). A quote opens a string only
    where a TOML value can start (after a comma, a bracket, a brace, ``=`` or the start): the apostrophe of a bare
    word (``it's,b``) kept the rest of the line in one item."""
    items, start, depth, quote = [], 0, 0, ""
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'" and text[:i].rstrip()[-1:] in ("", ",", "[", "{", "="):
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    return [*items, text[start:]]


def join_field(section: str, key: object) -> str:
    """``section.key``, or just ``key`` at the top level (section ""); always a string (a key of a dict built in Python
    may be an int: the field of its error is still text)."""
    return f"{section}.{key}" if section else str(key)


@functools.lru_cache(maxsize=1024)
def _hints(cls: Hashable) -> dict[str, Any]:
    """``typing.get_type_hints(cls)`` once a class: evaluating the annotations was half of loading a config
    (``chillfl list experiments`` loads every bundled one, with its variants). Read-only to callers."""
    return typing.get_type_hints(cls)


def option_type(cls: type, path: str) -> Any:
    """The annotation of the dotted option ``path`` inside the options dataclass ``cls`` (``client.lr`` of a run's
    config: ``float``), through its nested typed tables; None where a part is no typed option (a part's own free
    table, ``algorithm.mu``; an :class:`OwnTable`; a table itself; an unknown name)."""
    tp: Any = cls
    for part in path.split("."):
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or issubclass(tp, OwnTable) or part not in _option_names(tp):
            return None
        tp = _hints(tp)[part]
    return None if isinstance(tp, type) and dataclasses.is_dataclass(tp) else tp


class HasOptions(Protocol):
    """A registry entry (a dataset's, model's, policy's, algorithm's ...): what it parses its table into."""

    @property
    def options(self) -> type: ...


@dataclasses.dataclass(frozen=True)
class Chosen:
    """Which entry of a family an options table belongs to, so that an option of a sibling is named as theirs.

    ``temperature.value`` under ``policy = "none"`` is a typo of nothing: what helps is "``value`` is an
    option of fedchill, fixed". ``family`` is read only when an option is unknown.
    """

    field: str
    """The key that chose the entry (``temperature.policy``, ``algorithm.name``)."""
    name: str
    family: Callable[[], Mapping[str, HasOptions]]
    wrapped_options: str | None = None
    """The option holding the options of the entry this one wraps (PA3Fed's ``base_options``); None: it wraps none."""


def _option_names(cls: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


CHOOSER_KEYS = ("name", "method", "kind", "policy", "mechanism")
"""The keys that choose a table's implementation; each table uses one (``attack.kind``, ``privacy.mechanism``)."""

METHOD_FIELD = "algorithm.name"
"""Where a run's config names its method: a flat ``method=...`` (as other frameworks write it), or a flag ``--method``,
is pointed here, with :data:`METHOD_FAMILIES`' other homes."""
METHOD_FAMILIES = "; a soft-label or prototype method: distillation.method, prototypes.method"


def override_value(value: object) -> str:
    """``value`` as the right-hand side of an override a hint spells out: a plain word as it is (``fedavg``), anything
    else as its quoted repr (a TOML string too)."""
    text = value if isinstance(value, str) else short_repr(value)
    return text if re.fullmatch(r"[\w.:+-]+", text) else short_repr(text)


def _table_keys(field: dataclasses.Field[Any], tp: Any) -> set[str] | None:
    """The keys the table ``field`` (annotated ``tp``) is known to take: a typed table's options, a free table's
    (``temperature``, a ``dict``) the keys of its default (``policy``); None where the field is no table."""
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _option_names(_shared_options(tp))
    if (tp is dict or typing.get_origin(tp) is dict) and field.default_factory is not dataclasses.MISSING:
        default = field.default_factory()
        return set(default) if isinstance(default, Mapping) else set()
    return None


def _shared_options(tp: type) -> type:
    """The dataclass whose fields a table of ``tp`` takes as written: ``tp`` itself, or for an :class:`OwnTable` the
    options it shares across its choices (``[attack]``: :class:`~chillfl.settings.attack.AttackOptions`), not its parsed
    bookkeeping (``options``, ``held``: a flag ``--held 5`` was sent to ``attack.held=5``, an unknown option)."""
    if not issubclass(tp, OwnTable):
        return tp
    return next((b for b in tp.__mro__[1:] if dataclasses.is_dataclass(b) and not issubclass(b, OwnTable)), tp)


def option_takes(cls: type, path: str, value: object) -> bool:
    """Whether the dotted option ``path`` of a config of ``cls`` takes ``value`` by its type (``eval.clients`` takes no 3,
    ``attack.clients`` no 3 either: a list); True where its type is not known here (a part's own options). Range checks
    are the config's: ``federation.stragglers`` takes 2 here. For a hint to offer only the options that can hold a value."""
    tp: Any = cls
    for part in path.split("."):
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            tp = _shared_options(tp)
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)) or part not in _option_names(tp):
            return True
        tp = _hints(tp)[part]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return True  # a table: its chooser's value is checked against its registry, not here
    try:
        coerce(value, tp, path)
    except ConfigError:
        return False
    return True


def option_homes(cls: type, key: str, section: str = "") -> list[str]:
    """The tables of the options dataclass ``cls`` (at ``section``) that take option ``key``: ``rounds`` at a run
    config's top level is ``federation``'s, ``policy`` is ``temperature``'s. Where a flat ``rounds=3`` (Flower's
    ``num_rounds``, FL-bench's flat keys) or a flag ``--rounds 3`` belongs; a free table is known by its default's keys."""
    hints = _hints(typing.cast(Hashable, cls))
    return [join_field(section, f.name) for f in sorted(dataclasses.fields(cls), key=lambda f: f.name)
            if f.init and key in (_table_keys(f, hints[f.name]) or ())]


def flat_key_fields(cls: type, key: str) -> list[str]:
    """The dotted options of a config of ``cls`` that a flat ``key`` (or a flag ``--key``) means: ``key`` itself, an option of
    ``cls``; the key choosing the table ``key`` names (``algorithm``: ``algorithm.name``); else the option in each table
    that takes it (:func:`option_homes`: ``rounds``: ``federation.rounds``), and ``method``: :data:`METHOD_FIELD`.
    None for a table without a chooser (``federation``) or a key no table takes (an empty list)."""
    found = next((f for f in dataclasses.fields(cls) if f.init and f.name == key), None)
    if found is not None:
        chooser = table_chooser(cls, key)
        return [f"{key}.{chooser}"] if chooser else [] if _table_keys(found, _hints(typing.cast(Hashable, cls))[key]) is not None else [key]
    return [f"{home}.{key}" for home in option_homes(cls, key)] or ([METHOD_FIELD] if key == "method" else [])


def table_chooser(cls: type, key: str) -> str | None:
    """The key that chooses the implementation of ``cls``'s table ``key`` (``algorithm``: ``name``; ``temperature``:
    ``policy``; ``attack``: ``kind``), None where ``key`` is no such table: ``algorithm=fedavg`` is ``algorithm.name=fedavg``."""
    found = next((f for f in dataclasses.fields(cls) if f.init and f.name == key), None)
    keys = None if found is None else _table_keys(found, _hints(typing.cast(Hashable, cls))[key])
    return next((k for k in CHOOSER_KEYS if k in keys), None) if keys else None


def _misread_key(section: str, key: str, names: set[str], chooser: str | None = None, value: object = "VALUE") -> str:
    """A hint for a key written the way another table (or framework) spells it, where no spelling is close.

    ``attack.name`` (the attack is ``attack.kind``) and ``algorithm.options.mu`` (options are flat: ``algorithm.mu``)
    are a reader's guesses from the sibling tables, not typos, so difflib finds nothing to suggest. At the top level a
    flat ``method=`` (other frameworks' key) is pointed to :data:`METHOD_FIELD` (``value``: what it was given); the
    top level's ``name`` is the run's, no table's chooser ("[] is chosen by name" sent a user to rename the run).
    """
    if key in CHOOSER_KEYS and not section:  # the top level's own `name` is the run's: `name=fedav` renamed the run, trained FedAvg
        return f" (a run's method is {METHOD_FIELD}, e.g. {METHOD_FIELD}={override_value(value)}{METHOD_FAMILIES})" if key == "method" else ""
    if key in CHOOSER_KEYS:
        chooser = chooser or next((k for k in CHOOSER_KEYS if k in names), None)
        return f" ([{section}] is chosen by {join_field(section, chooser)})" if chooser and chooser != key else ""
    if key == "options" and names:
        return f" (options are written flat: {join_field(section, min(names))}, not {join_field(section, 'options.' + min(names))})"
    return ""


def unknown_option(section: str, key: str, names: set[str], chosen: Chosen | None = None, homes: Sequence[str] = (),
                   value: object = "VALUE") -> ConfigError:
    """The error for option ``key`` that ``section``'s dataclass (fields ``names``) does not take.

    ``homes``: the tables of ``section`` that take ``key`` (``rounds`` at the top level: ``federation``), named instead
    of a spelling suggestion: a flat ``rounds=3`` (Flower's ``num_rounds``, FL-bench's flat keys) is a misplaced key.
    ``value``: what ``key`` was given, for a hint that spells the override out.
    """
    what = "option" if section else "key or section"
    allowed = f"allowed: {', '.join(sorted(names))}" if names else "the table takes no options"
    if chosen is None:
        where = (f" (an option of {', '.join(f'[{h}]' for h in homes)}: {', '.join(f'{h}.{key}' for h in homes)})" if homes
                 else did_you_mean(key, names) or _misread_key(section, key, names, value=value))
        return ConfigError(join_field(section, key), f"unknown {what}{where}; {allowed}")
    owners = sorted(n for n, entry in chosen.family().items() if dataclasses.is_dataclass(entry.options) and key in _option_names(entry.options))
    # A sibling's option, spelt right, is no typo: no spelling is suggested (privacy.target_quantile under dp-sgd is
    # dp-fedavg's, not a misspelt target_epsilon).
    hint = "" if owners else did_you_mean(key, names) or _misread_key(section, key, names, chosen.field.rpartition(".")[2])
    message = f"unknown option{hint}; " + (allowed if names else f"{chosen.field} = {chosen.name!r} takes no options")
    if owners:
        message += f"; {key!r} is an option of {', '.join(owners)} (set {chosen.field}"
        message += f", or, for the method it wraps, {join_field(section, chosen.wrapped_options)}.{key})" if chosen.wrapped_options else ")"
    return ConfigError(join_field(section, key), message)


def parse_options(cls: type[T], table: Mapping[str, Any] | None, section: str, chosen: Chosen | None = None) -> T:
    """Build dataclass ``cls`` from ``table``; unknown keys and bad types raise ConfigError.

    ``chosen``: the registry entry ``cls`` belongs to, so an unknown option that a sibling takes says so.
    """
    table = dict(table or {})
    hints = _hints(typing.cast(Hashable, cls))  # a class is hashable; mypy cannot tell for type[T]
    names = _option_names(cls)
    unknown = sorted(set(table) - names)
    if unknown:
        key = unknown[0]
        raise unknown_option(section, key, names, chosen, option_homes(cls, key, section), table[key])
    for key, value in table.items():  # `algorithm=fedavg`: "expected a table" alone did not say which key chooses it
        chooser = table_chooser(cls, key) if isinstance(value, str) else None
        if chooser is not None:
            field = join_field(section, key)
            raise ConfigError(field, f"expected a table, got {short_repr(value)}: [{field}] is chosen by its {chooser}, {field}.{chooser}={override_value(value)}")
    kwargs = {k: coerce(v, hints[k], join_field(section, k)) for k, v in table.items()}
    check_bounds(typing.cast(Hashable, cls), kwargs, section)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.init and f.name not in kwargs and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            # an option without a default (a plugin's Options may have one): unset, it was a TypeError from the constructor
            raise ConfigError(join_field(section, f.name), "required option: it has no default, so the table must set it")
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if callable(check):
        try:
            check(section)
        except ConfigError:
            raise
        except (ValueError, TypeError) as exc:  # a plugin's validate() raising as Python code does: one line on its table, not a traceback
            raise ConfigError(section or type(obj).__qualname__, f"{type(obj).__qualname__}.validate(): {exc}") from None
    return obj


@functools.cache
def _bounds(cls: Hashable) -> dict[str, AtMost]:
    """The :class:`AtMost` bounds declared on ``cls``'s fields (``Scale`` or ``Scale | None``), by field name."""
    bounds: dict[str, AtMost] = {}
    for name, tp in typing.get_type_hints(cls, include_extras=True).items():
        for arg in (tp, *typing.get_args(tp)) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,):
            if typing.get_origin(arg) is Annotated:
                bounds.update({name: m for m in typing.get_args(arg)[1:] if isinstance(m, AtMost)})
    return bounds


def check_bounds(cls: Hashable, values: Mapping[str, Any], section: str) -> None:
    """Refuse a value past its field's declared :class:`AtMost` bound (``values``: the table as coerced, or the fields of
    an options object built in Python, :func:`check_built`). A NaN or an infinity is refused too: a parsed table never
    holds one (:func:`coerce`), but ``DittoOptions(lam=math.nan)`` is never parsed, and NaN passes ``abs(x) > bound``."""
    for name, bound in _bounds(cls).items():
        value = values.get(name)
        if not is_real(value):
            continue
        field = join_field(section, name)
        if not is_finite_real(value):
            raise ConfigError(field, f"must be a finite number, got {short_repr(value)}")
        if abs(value) > bound.largest:
            shown = f"{value:g}" if isinstance(value, float) else short_repr(value)  # an int of 400 digits has no float to format
            raise ConfigError(field, f"must be at most {bound.largest:.4g} in size ({bound.why}), got {shown}")


def check_built(options: object, section: str) -> None:
    """The :class:`AtMost` bounds of an options dataclass built in Python, and of the option tables nested in it, each
    refusal on ``section.<option>``. Why: :func:`parse_options` checks them on a table it reads, but an instance's
    options (``aggregator=MyMethod(MyOptions(w=1e308))``, a term's, a policy's) are never parsed, and a bound declared
    beside the type was then no bound: the run started and overflowed in round 1. A class whose annotations cannot
    be resolved here (names local to a function) declares no bound that can be read: nothing is checked."""
    if not dataclasses.is_dataclass(options) or isinstance(options, type):
        return
    values = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
    try:
        _bounds(type(options))
    except (NameError, TypeError):  # typing.get_type_hints on a forward reference it cannot resolve
        return
    check_bounds(type(options), values, section)
    for name, value in values.items():
        check_built(value, join_field(section, name))


def require(condition: bool, field: str, message: str) -> None:
    """Raise ConfigError(field, message) unless ``condition`` holds."""
    if not condition:
        raise ConfigError(field, message)


def require_range(value: float, lo: float, hi: float, field: str) -> None:
    """Raise ConfigError unless lo <= value <= hi (bounds that keep sizes and loops sane)."""
    require(lo <= value <= hi, field, f"must be in [{lo}, {hi}], got {value}")


def require_square_fits(value: float, field: str, computed: str, factor: float = 1.0) -> None:
    """Refuse a ``value`` whose ``factor * value**2`` is no finite float64, naming the computation (``computed``) that
    squares it. Why: Python's ``float ** 2`` raises ``OverflowError`` past about 1.34e154 (where numpy and torch give
    inf), so an option squared in Python (a noise multiplier in the accountant, a kernel width, an Adam floor) ended
    as a traceback from deep inside round 1, or from the accountant at start-up, instead of one line on its field."""
    largest = math.sqrt(FLOAT64_MAX / factor)
    require(abs(value) <= largest, field, f"must be at most {largest:.4g}: {computed} must be a finite float64, got {value:g}")


def require_visible_text(text: str, field: str, what: str = "text") -> None:
    """Refuse ``text`` that is blank or holds control or format characters (newlines, BEL, terminal escapes, bidi
    overrides). Why: a run's name and its folders (``out_dir``, ``data_dir``, a state folder) are printed and made on
    disk; ``out_dir = "r\\u0007\\u202eX"`` beeped and printed the rest of its results line reversed, and a blank one
    made a folder named by spaces. ``what``: what the text is, for the message (``a name``, ``a path``)."""
    require(bool(text) and not text.isspace(), field, f"must be {what}, not empty or blank, got {short_repr(text)}")
    bad = [ch for ch in text if unicodedata.category(ch) in ("Cc", "Cf", "Co", "Zl", "Zp")]
    require(not bad, field, f"must not contain control characters, got {short_repr(text)}")


def warn_unread(options: Any, names: Sequence[str], field: str, because: str) -> None:
    """One warning naming each of ``names`` (fields of the dataclass ``options``) set away from its default, which
    ``because`` says this run does not read. A warning, not a refusal: a grid over the option that decides
    (``--grid temperature.init=true,false``) reads them in one variant only; accepted silently, a setting that did
    nothing hid that it did nothing. ``field``: the options' section, e.g. ``temperature``."""
    defaults = {f.name: f.default_factory() if f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING else f.default
                for f in dataclasses.fields(options)}  # a list option's default comes from its factory
    values = vars(options)
    unread = [f"{field}.{name} = {values[name]!r}" for name in names if values[name] != defaults[name]]
    if unread:
        verb, them = ("is", "it") if len(unread) == 1 else ("are", "them")
        warn_once(logging.getLogger(__name__), f"{' and '.join(unread)} {verb} not read {because}: this run ignores {them}")


def total_memory_bytes() -> int | None:
    """Physical memory of this machine (None where ``os.sysconf`` cannot tell)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, OSError, ValueError):
        return None


def require_memory(need: float, field: str, what: str) -> None:
    """Refuse, before allocating, a run whose estimate ``need`` (bytes) exceeds the machine's memory.

    One line with the estimate, so a typo such as ``width = 10**9`` fails at
    once instead of swapping, or aborting inside the allocator.
    """
    total = total_memory_bytes()
    if total is not None and need > total:
        amount = f"{need / GIB:,.1f} GiB" if math.isfinite(need) and need < 2**100 else "more than any machine has"
        raise ConfigError(field, f"{what}: at least {amount} of memory needed; this machine has {total / GIB:,.1f} GiB")


def blame(options: Any, estimate: Callable[[Any], float], section: str, default_field: str) -> str:
    """The option whose reset to its default lowers ``estimate`` most: the field a memory error names.

    ``options`` is a dataclass instance; returns ``default_field`` when no
    single option is to blame (e.g. an architecture too big at its defaults).
    """
    current = estimate(options)
    best, best_value = default_field, current
    for f in dataclasses.fields(options):
        if f.default is dataclasses.MISSING or getattr(options, f.name) == f.default:
            continue
        try:
            value = estimate(dataclasses.replace(options, **{f.name: f.default}))
        except (ValueError, TypeError, RuntimeError, OverflowError, MemoryError):  # does not build: not the culprit
            value = current
        if value < best_value:
            best, best_value = join_field(section, f.name), value
    return best


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """Options of a part that takes none (any key given is an error)."""

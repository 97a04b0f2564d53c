"""Typed option tables.

Every pluggable component (dataset, partitioner, model, temperature policy,
algorithm, ...) declares its options as a frozen dataclass and parses its TOML
table with :func:`parse_options`. Unknown keys and wrongly typed values raise
:class:`~chillfl.errors.ConfigError` naming ``section.key``, so a typo fails at
start-up instead of silently using a default.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Mapping, TypeVar

from chillfl.errors import ConfigError

T = TypeVar("T")

_NUMERIC = (int, float)


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def coerce(value: Any, tp: Any, field: str) -> Any:
    """Check ``value`` against annotation ``tp`` (basic types, Optional, unions, tuples, lists, dicts)."""
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
        raise ConfigError(field, f"expected {allowed}, got {value!r}")
    if origin is typing.Literal:
        allowed = typing.get_args(tp)
        if value not in allowed:
            raise ConfigError(field, f"unknown value {value!r}; allowed: {', '.join(map(str, allowed))}")
        return value
    if origin in (list, tuple):
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise ConfigError(field, f"expected a list, got {value!r}")
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [coerce(v, inner, field) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(field, f"expected a table, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(field, f"expected true or false, got {value!r}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, _NUMERIC):
            raise ConfigError(field, f"expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, float) and value.is_integer())):
            raise ConfigError(field, f"expected an integer, got {value!r}")
        return int(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(field, f"expected a string, got {value!r}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(field, f"expected a table, got {value!r}")
        return parse_options(tp, value, field)
    return value


def join_field(section: str, key: str) -> str:
    """``section.key``, or just ``key`` at the top level (section "")."""
    return f"{section}.{key}" if section else key


def parse_options(cls: type[T], table: Mapping[str, Any] | None, section: str) -> T:
    """Build dataclass ``cls`` from ``table``; unknown keys and bad types raise ConfigError."""
    table = dict(table or {})
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(table) - names)
    if unknown:
        raise ConfigError(
            join_field(section, unknown[0]),
            f"unknown option; allowed: {', '.join(sorted(names)) or '(none)'}",
        )
    kwargs = {k: coerce(v, hints[k], join_field(section, k)) for k, v in table.items()}
    obj = cls(**kwargs)  # type: ignore[call-arg]
    check = getattr(obj, "validate", None)
    if callable(check):
        check(section)
    return obj


def require(condition: bool, field: str, message: str) -> None:
    """Raise ConfigError(field, message) unless ``condition`` holds."""
    if not condition:
        raise ConfigError(field, message)


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """Options of a part that takes none (any key given is an error)."""

"""The ``[prototypes]`` table and the registry of prototype methods, typed: parsed once, by the config.

One flat table names a method and sets its options::

    [prototypes]
    method = "fedhkd"          # or "mypkg.protos:SPEC"
    noise_std = 0.5            # the method's own options, validated like a built-in's

A method is one :class:`chillfl.prototypes.spec.PrototypeSpec` (``SPEC`` in the method's
module), found one way, built-in or not: a built-in's name is the name of its module under
``chillfl/prototypes/methods/``; a user's is an import path ``"pkg.module:SPEC"`` or a
``chillfl.plugins`` entry point (:func:`chillfl.plugins.resolve`). Both are loaded by
:func:`chillfl.plugins.load_object` and checked the same way. Listing names imports nothing;
parsing a method's options imports its module (and torch), as a plugin's would. The protocol
(:mod:`chillfl.protocols.prototypes`) reads the result from
:attr:`chillfl.config.RunConfig.prototype_settings`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, runtime_checkable

from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError, did_you_mean
from chillfl.options import parse_options
from chillfl.plugins import SpecFamily

SECTION = "prototypes"

BUILT_IN = "chillfl.prototypes.methods"
"""The package whose modules are the built-in methods, each registered by its ``SPEC``."""

SPEC_FIELDS = ("options", "hooks", "shares_model", "summary")
"""What a prototype method's spec has: how the registry tells one apart without importing the protocol."""


@dataclass(frozen=True)
class PrototypeOptions:
    """The options every prototype method shares: only ``method`` (a built-in's name, an import path or an entry point)."""

    method: str = ""


@runtime_checkable
class PrototypeMethodSettings(Protocol):
    """What the config reads of a method's spec (:class:`chillfl.prototypes.spec.PrototypeSpec` has it all)."""

    @property
    def options(self) -> type:
        """Its own options, a dataclass."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What the method declares (read where a runtime asks, e.g. the Flower apps' ``on_flower``)."""
        ...

    @property
    def summary(self) -> str:
        ...

    def shares_model(self, options: Any) -> bool:
        """Whether clients also send their models with these options."""
        ...

    def declared(self, options: Any) -> Capabilities:
        """What the method declares under these options (its cost may follow them)."""
        ...


@dataclass(frozen=True)
class PrototypeSettings:
    """The parsed ``[prototypes]`` table: the method's name and its own options (every default filled in)."""

    method: str
    options: Any

    @property
    def spec(self) -> PrototypeMethodSettings:
        """The method's spec (a :class:`chillfl.prototypes.spec.PrototypeSpec`)."""
        return method_spec(self.method)

    @property
    def capabilities(self) -> Capabilities:
        """What the method declares under these options (:meth:`PrototypeMethodSettings.declared`)."""
        return self.spec.declared(self.options)

    @property
    def share_model(self) -> bool:
        """Whether the clients also send their models (the spec's ``shares_model`` of these options)."""
        return bool(self.spec.shares_model(self.options))


def _is_spec(obj: Any) -> bool:
    return not isinstance(obj, type) and all(hasattr(obj, name) for name in SPEC_FIELDS)


FAMILY = SpecFamily(BUILT_IN, f"{SECTION}.method", "chillfl.extend.PrototypeSpec", _is_spec)
"""Built-ins (one module each under ``BUILT_IN``) and plugins, found the same way (:class:`~chillfl.plugins.SpecFamily`)."""


def built_in_names() -> tuple[str, ...]:
    """The built-in methods: one module each under ``BUILT_IN`` (listed, not imported)."""
    return FAMILY.built_in_names()


def method_names() -> list[str]:
    """Built-in names and the ``chillfl.plugins`` entry points that name a spec of this family."""
    return FAMILY.names()


def method_spec(name: Any) -> PrototypeMethodSettings:
    """The spec of method ``name``: a built-in's (its module's ``SPEC``), or a user's by import path or entry point."""
    return FAMILY.spec(name)  # type: ignore[no-any-return]


def __getattr__(name: str) -> Any:
    """``METHODS``: every built-in's spec by name (imports each method's module, so only on demand)."""
    if name == "METHODS":
        return {n: method_spec(n) for n in built_in_names()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls) if f.init}


def parse_prototypes(table: Mapping[str, Any]) -> PrototypeSettings:
    """The ``[prototypes]`` table, checked, with the method's defaults filled in; a ConfigError names any bad key."""
    table = dict(table)
    method = table.get("method")
    if not isinstance(method, str) or not method:
        raise ConfigError(f"{SECTION}.method", f"is required; allowed: {', '.join(method_names())}")
    spec = method_spec(method)
    shared, own = _fields(PrototypeOptions), _fields(spec.options)
    for key in sorted(table):
        if key not in shared and key not in own:
            raise ConfigError(
                f"{SECTION}.{key}",
                f"unknown option for method {method!r}{did_you_mean(key, shared | own)}; allowed: {', '.join(sorted(shared | own))}",
            )
    options: Any = parse_options(spec.options, {k: v for k, v in table.items() if k in own}, SECTION)
    return PrototypeSettings(method, options)

"""Temperature policies: ``none`` (T = 1), ``fixed`` (FLex&Chill), ``fedchill`` (per-client adaptive).

Each policy has a server half and, where the temperature is the client's own
(FedChill), a client half that keeps it in the client's state
(:mod:`chillfl.temperature.base`).

Config::

    [temperature]
    policy = "fixed"
    value = 0.05

or a user's policy by import path (``policy = "mypkg.warmup:LinearWarmup"``, options validated
like a built-in's) or by a ``chillfl.plugins`` entry point name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from chillfl.errors import ConfigError, choice_error
from chillfl.options import NoOptions, parse_options
from chillfl.plugins import has_methods, plugin_names, resolve
from chillfl.temperature.base import ConstantTemperature, FixedOptions, TemperaturePolicy
from chillfl.temperature.fedchill import ClassCounts, FedChillOptions, FedChillPolicy, needs_federation


def _local(options: Any) -> tuple[str, str] | None:
    return None


class PolicySpec(NamedTuple):
    """A policy's option dataclass, how to build it from (options, class counts), and one line about it."""

    options: type
    build: Callable[[Any, ClassCounts], TemperaturePolicy]
    """``counts`` may be a function computing them (a pass over every client's labels): a policy calls it only if it must."""
    summary: str
    federation: Callable[[Any], tuple[str, str] | None] = _local
    """(option, why) when the options make the server compute from every client's label counts (None: no client's counts leave it)."""


POLICIES: dict[str, PolicySpec] = {
    "none": PolicySpec(NoOptions, lambda o, counts: ConstantTemperature(1.0), "standard softmax, T = 1"),
    "fixed": PolicySpec(FixedOptions, lambda o, counts: ConstantTemperature(o.value), "one T for every client and round (FLex&Chill)"),
    "fedchill": PolicySpec(FedChillOptions, FedChillPolicy, "per-client T from label heterogeneity, decayed on stagnation (FedChill)", needs_federation),
}


POLICY_METHODS = ("temperature", "observe", "client_half", "state_dict", "load_state_dict")
"""What a user's policy class has (:class:`~chillfl.temperature.base.TemperaturePolicy`): how a registry recognises one."""


def policy_names() -> list[str]:
    """Built-in names and the ``chillfl.plugins`` entry points that name a policy."""
    return sorted({*POLICIES, *plugin_names(lambda obj: isinstance(obj, PolicySpec) or has_methods(obj, POLICY_METHODS))})


def user_policy(obj: Any, name: str, field: str) -> PolicySpec:
    """A user's object (import path or entry point) as a :class:`PolicySpec`, or a ConfigError on ``field``.

    ``obj`` is a ``PolicySpec`` (options, ``build(options, class_counts)``, summary: the built-ins' form),
    or a policy class: ``cls(options)`` when it declares an ``Options`` dataclass (parsed and validated
    like a built-in's), ``cls()`` otherwise.
    """
    if isinstance(obj, PolicySpec):
        return obj
    if not isinstance(obj, type):
        raise ConfigError(field, f"{name!r} must name a temperature policy class or a PolicySpec, got {type(obj).__name__}")
    if not has_methods(obj, POLICY_METHODS):
        missing = [m for m in POLICY_METHODS if not callable(getattr(obj, m, None))]
        raise ConfigError(field, f"{name!r} is not a temperature policy: it lacks {', '.join(missing)} (see chillfl.extend.TemperaturePolicy)")
    options = getattr(obj, "Options", None)
    if options is None:
        return PolicySpec(NoOptions, lambda o, counts: obj(), name)
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(field, f"{name!r}: its Options must be a dataclass, got {options!r}")
    return PolicySpec(options, lambda o, counts: obj(o), name)


def policy_spec(name: Any, section: str = "temperature") -> PolicySpec:
    """The built-in policy ``name``, or a user's (``"pkg.module:Name"``, a ``chillfl.plugins`` entry point)."""
    if isinstance(name, str) and name in POLICIES:
        return POLICIES[name]
    found = resolve(name, f"{section}.policy") if isinstance(name, str) and name else None
    if found is None:
        raise choice_error(f"{section}.policy", name, policy_names())
    return user_policy(found, name, f"{section}.policy")


def _parse(table: Mapping[str, Any], section: str) -> tuple[PolicySpec, Any]:
    spec = policy_spec(table.get("policy"), section)
    return spec, parse_options(spec.options, {k: v for k, v in table.items() if k != "policy"}, section)


def make_policy(table: Mapping[str, Any], class_counts: np.ndarray | Callable[[], np.ndarray], section: str = "temperature") -> TemperaturePolicy:
    """Build the policy named by ``table['policy']`` with the rest of the table as its options.

    ``class_counts``: the [clients, classes] matrix, or a function computing it, called
    only by a policy that must read it (FedChill with :func:`~chillfl.temperature.fedchill.needs_federation`).
    """
    spec, options = _parse(table, section)
    return spec.build(options, class_counts)


def federation_option(table: Mapping[str, Any], section: str = "temperature") -> tuple[str, str] | None:
    """(``section.option``, why) when the policy's server must read every client's label counts; None when no count leaves its client."""
    spec, options = _parse(table, section)
    found = spec.federation(options)
    return None if found is None else (f"{section}.{found[0]}", found[1])

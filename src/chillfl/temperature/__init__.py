"""Temperature policies: ``none`` (T = 1), ``fixed`` (FLex&Chill), ``fedchill`` (per-client adaptive).

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
from chillfl.temperature.fedchill import FedChillOptions, FedChillPolicy


class PolicySpec(NamedTuple):
    """A policy's option dataclass, how to build it from (options, class counts), and one line about it."""

    options: type
    build: Callable[[Any, np.ndarray], TemperaturePolicy]
    summary: str
    uses_counts: bool = True
    """Whether ``build`` reads the class counts (computing them is a pass over every client's labels)."""


POLICIES: dict[str, PolicySpec] = {
    "none": PolicySpec(NoOptions, lambda o, counts: ConstantTemperature(1.0), "standard softmax, T = 1", False),
    "fixed": PolicySpec(FixedOptions, lambda o, counts: ConstantTemperature(o.value), "one T for every client and round (FLex&Chill)", False),
    "fedchill": PolicySpec(FedChillOptions, FedChillPolicy, "per-client T from label heterogeneity, decayed on stagnation (FedChill)"),
}


def policy_names() -> list[str]:
    """Built-in names and the ``chillfl.plugins`` entry points that name a policy."""
    return sorted({*POLICIES, *plugin_names(lambda obj: isinstance(obj, PolicySpec) or has_methods(obj, POLICY_METHODS))})


POLICY_METHODS = ("temperature", "observe", "snapshot", "state_dict", "load_state_dict")


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
        return PolicySpec(NoOptions, lambda o, counts: obj(), name, False)
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ConfigError(field, f"{name!r}: its Options must be a dataclass, got {options!r}")
    return PolicySpec(options, lambda o, counts: obj(o), name, False)


def policy_spec(name: Any, section: str = "temperature") -> PolicySpec:
    """The built-in policy ``name``, or a user's (``"pkg.module:Name"``, a ``chillfl.plugins`` entry point)."""
    if isinstance(name, str) and name in POLICIES:
        return POLICIES[name]
    found = resolve(name, f"{section}.policy") if isinstance(name, str) and name else None
    if found is None:
        raise choice_error(f"{section}.policy", name, policy_names())
    return user_policy(found, name, f"{section}.policy")


def make_policy(table: Mapping[str, Any], class_counts: np.ndarray | Callable[[], np.ndarray], section: str = "temperature") -> TemperaturePolicy:
    """Build the policy named by ``table['policy']`` with the rest of the table as its options.

    ``class_counts``: the [clients, classes] matrix, or a function computing it, called
    only by a policy that reads it (not by ``none`` / ``fixed``).
    """
    spec = policy_spec(table.get("policy"), section)
    options: Any = parse_options(spec.options, {k: v for k, v in table.items() if k != "policy"}, section)
    if not spec.uses_counts:
        return spec.build(options, np.zeros((0, 0), dtype=np.int64))
    return spec.build(options, class_counts() if callable(class_counts) else class_counts)

"""Temperature policies: ``none`` (T = 1), ``fixed`` (FLex&Chill), ``fedchill`` (per-client adaptive).

Each policy has a server half and, where the temperature is the client's own
(FedChill), a client half that keeps it in the client's state
(:mod:`chillfl.temperature.base`).

Config::

    [temperature]
    policy = "fixed"
    value = 0.05
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from chillfl.errors import choice_error
from chillfl.options import NoOptions, parse_options
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


def policy_names() -> list[str]:
    return sorted(POLICIES)


def _parse(table: Mapping[str, Any], section: str) -> tuple[PolicySpec, Any]:
    name = table.get("policy")
    if name not in POLICIES:
        raise choice_error(f"{section}.policy", name, policy_names())
    spec = POLICIES[name]
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

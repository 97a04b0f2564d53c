"""Temperature policies: ``none`` (T = 1), ``fixed`` (FLex&Chill), ``fedchill`` (per-client adaptive).

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
    return sorted(POLICIES)


def make_policy(table: Mapping[str, Any], class_counts: np.ndarray | Callable[[], np.ndarray], section: str = "temperature") -> TemperaturePolicy:
    """Build the policy named by ``table['policy']`` with the rest of the table as its options.

    ``class_counts``: the [clients, classes] matrix, or a function computing it, called
    only by a policy that reads it (not by ``none`` / ``fixed``).
    """
    name = table.get("policy")
    if name not in POLICIES:
        raise choice_error(f"{section}.policy", name, policy_names())
    spec = POLICIES[name]
    options: Any = parse_options(spec.options, {k: v for k, v in table.items() if k != "policy"}, section)
    if not spec.uses_counts:
        return spec.build(options, np.zeros((0, 0), dtype=np.int64))
    return spec.build(options, class_counts() if callable(class_counts) else class_counts)

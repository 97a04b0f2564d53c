"""Temperature policies: ``none`` (T = 1), ``fixed`` (FLex&Chill), ``fedchill`` (per-client adaptive).

Config::

    [temperature]
    policy = "fixed"
    value = 0.05
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from chillfl.errors import choice_error
from chillfl.options import NoOptions, parse_options
from chillfl.temperature.base import ConstantTemperature, FixedOptions, TemperaturePolicy


def _none(options: Mapping[str, Any], class_counts: np.ndarray, section: str) -> TemperaturePolicy:
    parse_options(NoOptions, options, section)
    return ConstantTemperature(1.0)


def _fixed(options: Mapping[str, Any], class_counts: np.ndarray, section: str) -> TemperaturePolicy:
    return ConstantTemperature(parse_options(FixedOptions, options, section).value)


def _fedchill(options: Mapping[str, Any], class_counts: np.ndarray, section: str) -> TemperaturePolicy:
    from chillfl.temperature.fedchill import FedChillOptions, FedChillPolicy

    return FedChillPolicy(parse_options(FedChillOptions, options, section), class_counts)


POLICIES: dict[str, Callable[[Mapping[str, Any], np.ndarray, str], TemperaturePolicy]] = {
    "none": _none,
    "fixed": _fixed,
    "fedchill": _fedchill,
}


def policy_names() -> list[str]:
    return sorted(POLICIES)


def make_policy(table: Mapping[str, Any], class_counts: np.ndarray, section: str = "temperature") -> TemperaturePolicy:
    """Build the policy named by ``table['policy']`` with the rest of the table as its options."""
    name = table.get("policy")
    options = {k: v for k, v in table.items() if k != "policy"}
    if name not in POLICIES:
        raise choice_error(f"{section}.policy", name, policy_names())
    return POLICIES[name](options, class_counts, section)

"""Temperature policies: ``none`` (T = 1), ``fixed`` (FLex&Chill), ``fedchill`` (per-client adaptive).

Each policy's :class:`PolicySpec` is registered next to its code (:func:`register_policy`);
it has a server half and, where the temperature is the client's own
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

from typing import Any

from chillfl.temperature.registry import (
    POLICY_METHODS,
    ClassCounts,
    PolicySpec,
    check_policy,
    make_policy,
    parse_policy,
    policy_capabilities,
    policy_names,
    policy_options,
    policy_spec,
    register_policy,
    registered_policies,
    user_policy,
)

__all__ = [
    "POLICY_METHODS",
    "ClassCounts",
    "PolicySpec",
    "check_policy",
    "make_policy",
    "parse_policy",
    "policy_capabilities",
    "policy_names",
    "policy_options",
    "policy_spec",
    "register_policy",
    "registered_policies",
    "user_policy",
]


def __getattr__(name: str) -> Any:
    """``POLICIES``: the registered specs by name (read by tests and the generated configuration reference)."""
    if name == "POLICIES":
        return registered_policies()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The constant temperature policies, ``none`` (T = 1) and ``fixed`` (FLex&Chill), registered here.

Checked against papers/flexchill.txt Algorithm 1 and eis-lab/temperature-scaling ``Clients/naive.py`` (``train``: model(data) / T), 2026-12-02.

The two halves every policy implements are in :mod:`chillfl.temperature.policy` (re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from chillfl.capabilities import Capabilities
from chillfl.options import NoOptions, require
from chillfl.temperature.policy import TemperatureHalf, TemperaturePolicy, TemperatureState
from chillfl.temperature.registry import PolicySpec, register_policy

__all__ = ["ConstantTemperature", "FixedOptions", "TemperatureHalf", "TemperaturePolicy", "TemperatureState", "describe_policy"]


class ConstantTemperature:
    """T is the same for every client and round: ``none`` (T = 1) or ``fixed`` (FLex&Chill)."""

    def __init__(self, value: float = 1.0) -> None:
        self.value = float(value)
        self.options = FixedOptions(self.value)  # recorded for an instance passed from Python (``none`` is T = 1)
        if type(self) is ConstantTemperature:  # what an instance passed from Python declares: one T (a subclass declares its own)
            self.capabilities = Capabilities(trains_at=self.value)

    def temperature(self, client_id: int, round: int) -> float:
        return self.value

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        return None

    def client_half(self, num_classes: int) -> None:
        """The downlink's T is the T: nothing runs on the client."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """The value is configuration; nothing changes during a run."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError(f"ConstantTemperature has no state, got keys {sorted(state)}")


@dataclass(frozen=True)
class FixedOptions:
    """Options of the ``fixed`` policy: one temperature for all clients (FLex&Chill)."""

    value: float = 0.05

    def validate(self, section: str) -> None:
        require(self.value > 0, f"{section}.value", f"must be > 0, got {self.value}")


def describe_policy(policy: Any) -> str:
    return type(policy).__name__


NONE = register_policy("none", PolicySpec(NoOptions, lambda o, counts: ConstantTemperature(1.0), "standard softmax, T = 1", capabilities=lambda o: Capabilities(trains_at=1.0)))
FIXED = register_policy("fixed", PolicySpec(FixedOptions, lambda o, counts: ConstantTemperature(o.value), "one T for every client and round (FLex&Chill)",
                                            capabilities=lambda o: Capabilities(trains_at=o.value)))

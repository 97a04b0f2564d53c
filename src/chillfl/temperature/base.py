"""The constant temperature policies, ``none`` (T = 1) and ``fixed`` (FLex&Chill), registered here.

Checked against papers/flexchill.txt Algorithm 1 and eis-lab/temperature-scaling ``Clients/naive.py`` (``train``: model(data) / T), 2026-12-02.

The two halves every policy implements are in :mod:`chillfl.temperature.policy` (re-exported here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from chillfl.capabilities import Capabilities
from chillfl.options import NoOptions, require
from chillfl.temperature.policy import TemperatureHalf, TemperaturePolicy, TemperatureState
from chillfl.temperature.registry import PolicySpec, register_policy

__all__ = ["MAX_TEMPERATURE", "MIN_TEMPERATURE", "ConstantTemperature", "FixedOptions", "TemperatureHalf", "TemperaturePolicy", "TemperatureState", "describe_policy",
           "require_temperature"]

MIN_TEMPERATURE = 1e-4
"""The smallest training temperature a config may set (``fixed``'s ``value``, FedChill's ``t_min``, hence every T it starts
at or decays to). Why: local training divides the logits by T, and the loss's gradient in the logits is
``(softmax(z / T) - onehot(y)) / T``; at T = 1e-6 a float32 run of the bundled CNN on digits already ends round 1 with a
nan or inf loss, reported only as a divergence (``lower client.lr?``); at 1e-4 it stays finite. A typo such as
``value = 1e-30`` is refused at config time instead, naming its field."""

MAX_TEMPERATURE = 1e4
"""The largest training temperature a config may set (``fixed``'s ``value``, FedChill's ``t_max``). Why: for a large T
the softmax of ``z / T`` is near uniform and the loss's gradient in the logits shrinks as ``1 / T``, so at 1e4 a step
moves the model 1e-4 as far as at T = 1, and at 1e308 (float32's inf) the loss is exactly ln K from round 1 on: the run
learns nothing and says nothing (a fuzzer found it). Heating ablations and distillation use T of 2-100."""


def require_temperature(value: float, field: str) -> None:
    """A ConfigError on ``field`` unless ``value`` is a temperature in [:data:`MIN_TEMPERATURE`, :data:`MAX_TEMPERATURE`]
    (one line, before anything trains)."""
    require(math.isfinite(value) and MIN_TEMPERATURE <= value <= MAX_TEMPERATURE, field,
            f"must be a temperature in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}] (the logits are divided by T: a smaller T overflows "
            f"float32 training, its loss nan; a larger one shrinks every step by 1/T, so nothing trains), got {value}")


class ConstantTemperature:
    """T is the same for every client and round: ``none`` (T = 1) or ``fixed`` (FLex&Chill)."""

    def __init__(self, value: float = 1.0) -> None:
        self.value = float(value)
        self.options = FixedOptions(self.value)  # recorded for an instance passed from Python (``none`` is T = 1)
        self.options.validate("temperature")  # as FedChillPolicy: ``policy=ConstantTemperature(1e308)`` from Python ran, learning nothing
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
        require_temperature(self.value, f"{section}.value")


def describe_policy(policy: Any) -> str:
    return type(policy).__name__


NONE = register_policy("none", PolicySpec(NoOptions, lambda o, counts: ConstantTemperature(1.0), "standard softmax, T = 1", capabilities=lambda o: Capabilities(trains_at=1.0)))
FIXED = register_policy("fixed", PolicySpec(FixedOptions, lambda o, counts: ConstantTemperature(o.value), "one T for every client and round (FLex&Chill)",
                                            capabilities=lambda o: Capabilities(trains_at=o.value)))

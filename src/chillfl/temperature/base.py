"""Temperature policies: which softmax temperature each client trains with.

The engine asks ``policy.temperature(cid, round)`` before a client trains and
tells it ``policy.observe(cid, round, local_accuracy)`` afterwards, where
``local_accuracy`` is the client's model after local training on the client's
own validation split (None when the run has no client splits). Evaluation is
always at T = 1, so a policy only changes local training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from chillfl.options import require


class TemperaturePolicy(Protocol):
    """Per-client, per-round training temperature (server side: it holds its state, checkpointed by ``state_dict``)."""

    def temperature(self, client_id: int, round: int) -> float:
        """The T > 0 client ``client_id`` trains with in ``round`` (0-based): ``CE(logits / T, y)``."""
        ...

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        """After the client trained: its model's accuracy on its own validation split (None without client splits)."""
        ...

    def snapshot(self) -> Mapping[int, float]:
        """Current temperature of every client that has one (for metrics/plots)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What ``observe`` has changed since construction, for checkpoints (``{}`` when nothing)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` into a policy built with the same options and class counts."""
        ...


class ConstantTemperature:
    """T is the same for every client and round: ``none`` (T = 1) or ``fixed`` (FLex&Chill)."""

    def __init__(self, value: float = 1.0) -> None:
        self.value = float(value)

    def temperature(self, client_id: int, round: int) -> float:
        return self.value

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        return None

    def snapshot(self) -> Mapping[int, float]:
        return {}

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

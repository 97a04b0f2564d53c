"""What a temperature policy is: its server half and its client half (the types every policy implements).

Checked against papers/flexchill.txt Algorithm 1 (T in local training only) and papers/fedchill.txt Sec. 3.1/3.4 (validation after local training), 2026-12-02.

A policy has two halves, as a method's aggregator does. The server half
(:class:`TemperaturePolicy`) lives with the server: ``policy.temperature(cid,
round)`` is what the server offers in the client's downlink, and
``policy.observe(cid, round, local_accuracy)`` is told each client's local
accuracy after its update. The client half (:class:`TemperatureHalf`, from
``policy.client_half(num_classes)``; None for a constant T) travels to the
clients: before training it picks the client's temperature from the
client's own state, and after the client's local evaluation it returns the
client's next state. That state is the client's, kept with it as the
aggregator halves' state is (a name -> tensor table; chillfl's client store,
or a Flower node's ``Context.state``), so the server holds no per-client
temperature. ``local_accuracy`` is the client's model after local training
on its own validation split (None when the run has no client splits).
Evaluation is always at T = 1, so a policy only changes local training.
"""

from __future__ import annotations

from typing import Any, Mapping, Protocol

import torch

TemperatureState = dict[str, torch.Tensor]
"""A client's own temperature entries between its participations (FedChill's ``fedchill.*``).

Plain tensors under the policy's own key prefix, so they live in the same per-client table as an
aggregator half's :data:`~chillfl.aggregation.base.ClientState` and travel and persist the same way."""


class TemperatureHalf(Protocol):
    """The part of a temperature policy that runs on the client, around its local training.

    It carries options only, never server state; the client's own state comes in as
    ``state`` and goes out as the returned entries, and the runtime keeps it.
    """

    def temperature(self, state: Mapping[str, torch.Tensor], offered: float, labels: torch.Tensor) -> float:
        """The T the client trains at this round: from its own ``state``; before it has one, the start
        temperature (``offered`` by the server where only the federation can compute it, NaN: computed
        here, e.g. from the client's own training ``labels``)."""
        ...

    def finish(self, state: Mapping[str, torch.Tensor], temperature: float, local_accuracy: float | None) -> TemperatureState:
        """The client's next entries (its keys only; empty: nothing to keep) after training at ``temperature``."""
        ...


class TemperaturePolicy(Protocol):
    """The server half: per-client, per-round training temperature."""

    def temperature(self, client_id: int, round: int) -> float:
        """What the server sends in the downlink: the T itself, or (with a client half) the start
        temperature the client uses before it has a state of its own, NaN where the client computes it."""
        ...

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        """After the client trained: its model's accuracy on its own validation split (None without client splits)."""
        ...

    def client_half(self, num_classes: int) -> TemperatureHalf | None:
        """The part that runs on each client (None: every client trains at the downlink's T)."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """What ``observe`` has changed since construction, for checkpoints (``{}`` when nothing)."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` into a policy built with the same options and class counts."""
        ...

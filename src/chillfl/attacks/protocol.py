"""The round's attackers and the attack's success in every record, around any server protocol.

A wrapper, as :class:`chillfl.privacy.protocol.Accounted` is, so no protocol changes: after the inner
protocol's ``server_update`` it adds

* ``attackers``: the ids of the round's clients that attack (sorted; empty when none was sampled, and in a round the
  loop skipped, where nobody's upload was read);
* ``attack_success_rate`` (a kind with a ``probe`` hook, where the protocol has a global model): the new
  global model's accuracy on the probe's inputs and labels; ``backdoor``'s are the global test set's
  inputs whose true label is not ``target``, stamped with the trigger and labelled ``target``
  (Bagdasaryan et al. 2020's backdoor accuracy).

It keeps no state: its checkpoint is the inner protocol's.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch import nn

from chillfl.engine.protocol import AroundProtocol, ClientReply, ClientSide, ClientTask, MeasuresNow, ObservesSkippedRounds, ServerProtocol, capability
from chillfl.engine.record import Json, RoundRecord
from chillfl.training.local import evaluate

Forge = Callable[[int, Sequence[ClientReply[Any, Any]]], Sequence[ClientReply[Any, Any]]]
"""(round, replies) -> the replies the server receives, the attackers' rewritten."""

class Attacked(AroundProtocol):
    """``protocol`` with the round's attackers (and, where the attack has a probe, its success) in every record."""

    OWN = frozenset({"ids", "probe", "model", "eval_batch_size", "forge"})

    def __init__(
        self,
        protocol: ServerProtocol,
        ids: frozenset[int],
        model: nn.Module,
        probe: tuple[torch.Tensor, torch.Tensor] | None,
        eval_batch_size: int = 1024,
        client: ClientSide | None = None,
        forge: Forge | None = None,
    ) -> None:
        super().__init__(protocol, client)  # client: one whose attackers forge their uploads (soft-label rows)
        self.forge = forge
        """Rewrites the attackers' replies where the server receives them, before the inner server update (prototypes); None: none."""
        self.ids = ids
        self.model = model
        self.probe = probe
        """The attack's probe: inputs and the labels its success is measured against (None: the attack has none)."""
        self.eval_batch_size = eval_batch_size

    def server_update(self, round: int, tasks: Sequence[ClientTask[Any, Any]], replies: Sequence[ClientReply[Any, Any]]) -> RoundRecord:
        if self.forge is not None:
            replies = self.forge(round, replies)
        record = self.inner.server_update(round, tasks, replies)
        record.metrics["attackers"] = [t.client_id for t in tasks if t.client_id in self.ids]
        if (success := self._success()) is not None:
            record.metrics["attack_success_rate"] = success
        return record

    def _success(self) -> float | None:
        """The present global model's accuracy on the probe (None: no probe, or no global model to measure)."""
        if self.probe is None:
            return None
        state = self.inner.global_state()
        if state is None:
            return None
        x, y = self.probe
        return evaluate(self.model, state, x, y, self.eval_batch_size)[0]

    def measure_now(self) -> dict[str, Json]:
        """``attack_success_rate`` of the present state, as :meth:`server_update` records it
        (:class:`~chillfl.engine.protocol.MeasuresNow`), beside the inner protocol's own measures: a run stopped at a
        skipped round (which records none) has its final success measured on the model it stops with. None where the
        attack has a probe and the protocol no global model now (not measured); nothing without a probe."""
        measurer = capability(self.inner, MeasuresNow)  # the inner may be a wrapper too: not isinstance (Python 3.12)
        inner = {} if measurer is None else dict(measurer.measure_now())
        return {**inner, "attack_success_rate": self._success()} if self.probe is not None else inner

    def skipped_round(self, round: int) -> dict[str, Json]:
        """A round the loop skipped: ``attackers`` empty (no upload was read, so nobody attacked), beside what the inner
        protocol's own ``skipped_round`` returns (the accountant's ``epsilon``, a last round's evaluation), so that every
        record has the key."""
        observer = capability(self.inner, ObservesSkippedRounds)
        inner = {} if observer is None else dict(observer.skipped_round(round))
        return {**inner, "attackers": []}

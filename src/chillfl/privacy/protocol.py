"""The accountant around any server protocol: every round's ``epsilon`` in its record, the ledger in its checkpoint.

A wrapper, so no protocol changes: after the inner protocol's ``server_update`` it spends the round's
privacy on the ledger, per mechanism:

* ``dp-fedavg``: one subsampled Gaussian step for the whole population at q = clients_per_round /
  num_clients (fixed-size sampling, accounted as Poisson at that rate: docs/privacy.md);
* ``local``: one Gaussian step (q = 1) for each client that reported, on its own history, at sigma / 2 under
  replace-one adjacency (the default for ``local``: any two clipped updates differ by up to 2C);
* ``dp-sgd``: each client that trained spends its local steps at q_k = batch_size / n_k;
* ``local`` under the soft-label protocol: the clients' uploads go through
  :class:`~chillfl.privacy.softlabels.RowNoise` (this wrapper hands the protocol's client side the row
  mechanism); per client, ``epsilon`` composes one Gaussian release per round it uploaded (the bound
  for any single row, released at most once a round), and ``epsilon_upload`` composes every row it
  released (what its whole upload reveals about its data).

The reported ``epsilon`` (at ``delta``) is the largest over the privacy units: the worst-off client.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence


from chillfl.engine.protocol import AroundProtocol, ClientReply, ClientTask, ServerProtocol
from chillfl.engine.record import RoundRecord
from chillfl.privacy.accounting import Ledger, finite
from chillfl.privacy.plan import PrivacyPlan
from chillfl.privacy.softlabels import RowNoise
from chillfl.protocols.softlabels.client import SoftLabelClient
from chillfl.protocols.softlabels.messages import SoftLabelRoundDownlink
from chillfl.training.schedule import planned_steps

KEY = "privacy"
"""The ledger's entry in the protocol's checkpointed state."""


def completed(num_samples: int, batch_size: int, epochs: int, work: float) -> int:
    """Local steps a client of ``num_samples`` completes at ``work`` (:func:`chillfl.training.local.completed_steps`' count)."""
    planned = planned_steps(num_samples, batch_size, epochs)
    return planned if work >= 1.0 or planned == 0 else max(1, int(work * planned))


class Accounted(AroundProtocol):
    """``protocol`` with an accountant: same rounds, same state, plus ``epsilon`` in every record and the ledger in checkpoints."""

    OWN = frozenset({"plan", "sizes", "ledger", "uploads"})

    def __init__(self, protocol: ServerProtocol, plan: PrivacyPlan, sizes: Sequence[int], seed: int = 0) -> None:
        super().__init__(protocol)
        self.plan = plan
        self.sizes = tuple(sizes)
        self.ledger = Ledger(plan.delta, plan.accountant)
        self.uploads = Ledger(plan.delta, plan.accountant)
        """Soft-label rows: each client's whole uploads (every row it released, composed): ``epsilon_upload``."""
        if self.rows:  # the soft-label client releases its rows through the row mechanism
            inner = protocol.client
            assert isinstance(inner, SoftLabelClient), "the soft-label protocol's client side"
            self._client = dataclasses.replace(inner, privacy=RowNoise(plan.clip_norm, plan.noise_multiplier, plan.row_norm, seed, not inner.uses_logits))

    @property
    def rows(self) -> bool:
        """Whether the clients' soft-label rows are what is released (``local`` under the soft-label protocol)."""
        return self.plan.protocol == "softlabels"

    def server_update(self, round: int, tasks: Sequence[ClientTask[Any, Any]], replies: Sequence[ClientReply[Any, Any]]) -> RoundRecord:
        record = self.inner.server_update(round, tasks, replies)
        self.spend(tasks)
        record.metrics["epsilon"] = finite(self.ledger.epsilon())
        if self.rows:
            record.metrics["epsilon_upload"] = finite(self.uploads.epsilon())
        return record

    def spend(self, tasks: Sequence[ClientTask[Any, Any]]) -> None:
        """One round's privacy cost on the ledger (see the module docstring)."""
        p = self.plan
        if p.mechanism == "dp-fedavg":
            self.ledger.spend("clients", p.accounted_sigma, p.client_rate)
            return
        for task in tasks:
            unit = f"client {task.client_id}"
            if self.rows:  # each row it released: one Gaussian release per round (the worst row: released every round it uploaded)
                released = int(task.downlink.requested.numel()) if isinstance(task.downlink, SoftLabelRoundDownlink) else 0
                if released:
                    self.ledger.spend(unit, p.accounted_sigma, 1.0)
                    self.uploads.spend(unit, p.accounted_sigma, 1.0, released)
            elif p.mechanism == "local":
                self.ledger.spend(unit, p.accounted_sigma, 1.0)
            else:
                n = self.sizes[task.client_id]
                self.ledger.spend(unit, p.accounted_sigma, min(1.0, p.batch_size / n), completed(n, p.batch_size, p.epochs, task.work))

    def state_dict(self) -> dict[str, Any]:
        return {**self.inner.state_dict(), KEY: {"units": self.ledger.state_dict(), "uploads": self.uploads.state_dict()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.inner.load_state_dict({k: v for k, v in state.items() if k != KEY})
        saved = state.get(KEY, {})
        self.ledger.load_state_dict(saved.get("units", {}))
        self.uploads.load_state_dict(saved.get("uploads", {}))

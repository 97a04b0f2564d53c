"""The server-side book every protocol keeps the same way: one home for the per-round bookkeeping.

Each protocol's ``server_update`` hands every client's reply to :meth:`ServerBook.receive`
(finite training loss, both messages into the ledger, local accuracy into the
local log and the temperature policy) and builds the round's record with
:meth:`ServerBook.round_record`, which fills the fields every protocol records
the same way (clients, lr, ``train_loss``, ``temperature_mean``,
``client_train_loss``, bytes, per-client temperatures, local accuracy); the
protocol adds its own metrics and the global evaluation. What is left in a
protocol is what makes it that protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from chillfl.engine.ledger import CommunicationLedger
from chillfl.engine.record import Json, RoundRecord
from chillfl.engine.protocol import ClientReply, ClientTask, Message
from chillfl.aggregation.registry import algorithm_spec
from chillfl.config import RunConfig
from chillfl.errors import ConfigError, Diverged, loss_hint
from chillfl.numeric import weighted_mean
from chillfl.protocols.common import Evaluation, LocalLog, check_finite_loss, check_finite_state, record_message, server_step_hint
from chillfl.temperature.policy import TemperaturePolicy
from chillfl.settings.chosen import option_names
from chillfl.temperature.registry import trains_at

SERVER_STEP_OPTIONS = ("server_lr", "global_lr")
"""Options of an aggregator's table that size its server step (FedOpt's and FedAvgM's ``server_lr``, SCAFFOLD's
``global_lr``): what a server-step blow-up is sent to where the method takes them."""


def run_suspects(config: RunConfig) -> list[str]:
    """What a run adds that can blow the model up by itself, each as what to lower or check: ``[privacy]``'s noise
    (sigma x C) and ``[attack]``'s forged updates. Why: a blow-up by ``privacy.noise_multiplier = 1e30`` was blamed on
    ``client.lr``, or on server-side step options plain FedAvg does not have; the loss-health warnings read it too."""
    out = []
    if config.privacy.enabled:
        out.append(f"privacy.noise_multiplier or privacy.clip_norm ([privacy] mechanism = {config.privacy.mechanism!r} adds noise of scale sigma x C)")
    if config.attack.enabled:
        out.append(f"the attack's strength (attack.kind = {config.attack.kind!r} and its options)")
    return out


@dataclass(frozen=True)
class ClientLoss:
    """One reporting client's part in its round's record: its training loss, the samples it trained on (the loss's weight
    in ``train_loss``) and the temperature it trained at."""

    client_id: int
    train_loss: float
    num_samples: int
    temperature: float


class ServerBook:
    """Ledger, local log, temperature policy, evaluation and finite checks of one run's server."""

    def __init__(self, policy: TemperaturePolicy, evaluation: Evaluation, eval_clients: str) -> None:
        self.policy = policy
        self.evaluation = evaluation
        self.eval_clients = eval_clients
        self.ledger = CommunicationLedger()
        self.log = LocalLog(evaluation.empty_eval, evaluation.empty_val)
        self.per_client_temperature = trains_at(evaluation.config.temperature, policy) is None
        """Whether T is per client (its records carry each client's T): what the policy declares, not which class it is."""
        self.finite_locals: dict[int, bool] = {}
        """Each round's clients' own models: whether every local loss they measured was finite (absent: none measured)."""
        self.blown_after: int | None = None
        """The first round (0-based) after which the global model's test loss was not finite while every client's own
        model measured finite: the server's step blew the model up, the one case a later non-finite loss hints at it."""

    # ------------------------------------------------------------ one client's reply

    def receive(self, round: int, task: ClientTask[Any, Any], reply: ClientReply[Any, Any], train_loss: float, up: Message | None) -> None:
        """Check the reply's training loss; ledger both messages (``up`` None: the protocol prices its uplink itself); observe local accuracy."""
        check_finite_loss(round, task.client_id, "training loss", train_loss, self.hint())
        if reply.local_loss is not None and task.client_id not in self.log.empty:
            self.finite_locals[round] = self.finite_locals.get(round, True) and math.isfinite(reply.local_loss)
        if reply.nonfinite is not None:
            raise Diverged(round + 1, reply.nonfinite, task.client_id)
        record_message(self.ledger, round, "down", task.downlink, task.client_id)
        if up is not None:
            record_message(self.ledger, round, "up", up, task.client_id)
        self.log.observe(reply)
        self.policy.observe(task.client_id, round, reply.local_acc)

    def check_loss(self, round: int, client_id: int, name: str, value: float | None) -> None:
        """A further loss the protocol reports (distillation), checked like the training loss."""
        check_finite_loss(round, client_id, name, value, self.hint())

    def hint(self) -> str:
        """The whole hint of a non-finite loss: the server-step one when an earlier round's server step blew the model
        up (:meth:`server_step`), else :func:`~chillfl.errors.loss_hint` led by the noise or attack this run has."""
        return self.server_step() or loss_hint([f"lower {cause}" for cause in self.suspects()])

    def suspects(self) -> list[str]:
        """What this run adds that can blow the model up by itself (:func:`run_suspects`)."""
        return run_suspects(self.evaluation.config)

    def step_options(self) -> list[str]:
        """The options of the run's aggregator that size its server step (:data:`SERVER_STEP_OPTIONS`), read from its
        options table, so that a method without one (plain averaging) is never sent to an option it would refuse; a
        wrapper's base's too (PA3Fed over FedAdam: ``algorithm.base_options.server_lr``). A name the registry does not
        know (an aggregator passed from Python runs as ``"custom"``) has no table to read: none (the lookup's refusal
        replaced the divergence itself, about a key the user never wrote: rev116d 1)."""
        table = self.evaluation.config.algorithm
        out: list[str] = []
        for prefix, name in (("algorithm", table.get("name")), ("algorithm.base_options", table.get("base"))):
            if not isinstance(name, str):
                continue
            try:
                fields = option_names(algorithm_spec(name).options)
            except ConfigError:
                continue
            out += [f"{prefix}.{key}" for key in SERVER_STEP_OPTIONS if key in fields]
        return out

    def server_step(self) -> str | None:
        """The server-step hint of a non-finite loss, when an earlier round's server step blew the model up (else None).

        It names what this run has that the server's step applies: the aggregator's step options (``algorithm.server_lr``)
        where its table has them, ``[privacy]``'s noise, an attack's forged uploads; with none of these (plain averaging),
        None: the plain hint, which starts with ``client.lr``."""
        causes = [] if self.blown_after is None else self.step_options() + self.suspects()
        return server_step_hint(self.blown_after + 1, " or ".join(causes)) if self.blown_after is not None and causes else None

    @staticmethod
    def check_state(round: int, state: Mapping[str, torch.Tensor], what: str = "global model") -> None:
        check_finite_state(round, state, what)

    # ------------------------------------------------------------ the record's shared fields

    def round_record(self, round: int, clients: Sequence[int], lr: float | None, trained: Sequence[ClientLoss], *, detail: bool = False,
                     measured: Sequence[int] | None = None) -> RoundRecord:
        """The round's record with the fields every protocol fills the same way: ``clients`` (the round's, in task
        order), ``lr``, ``train_loss`` (the sample-weighted mean of ``trained``'s losses, :func:`weighted_mean`),
        ``temperature_mean``, ``client_train_loss`` (each reporting client's loss, keyed by its id as text), the
        round's bytes (:meth:`traffic`, ``detail``: by kind too), per-client temperatures (:meth:`temperatures`) and
        local accuracy (:meth:`local`, of ``measured``: the clients that trained this round where some trained without
        reporting, :class:`~chillfl.engine.protocol.TrainsUnreported`; else the round's). The protocol adds its own metrics, its method's and the global evaluation.

        The empty-round rule, one for every protocol: where no client had samples, ``train_loss`` is None (not written,
        as a skipped round's), never a number made up for it (it was NaN, 0.0 or the unweighted mean, by protocol);
        where nobody reported (a round an aggregator releases without uploads), ``temperature_mean`` and
        ``client_train_loss`` are None as well and no client is measured. Why one builder: the three protocols built
        these fields by hand and drifted; soft-label records lacked ``client_train_loss``, so the stability tool
        measured nothing for DS-FL or SCARLET. Call it once every reply is received: the bytes are the ledger's so far."""
        weights = [t.num_samples for t in trained]
        record = RoundRecord(
            round=round + 1,
            clients=list(clients),
            lr=lr,
            train_loss=weighted_mean([t.train_loss for t in trained], weights) if sum(weights) > 0 else None,
            temperature_mean=float(np.mean([t.temperature for t in trained])) if trained else None,
            client_train_loss={str(t.client_id): t.train_loss for t in trained} if trained else None,
        )
        record.metrics.update(self.traffic(round, detail=detail))
        record.metrics.update(self.temperatures({t.client_id: t.temperature for t in trained}))
        if trained:  # a round nobody reported measures no client, as a skipped one
            record.metrics.update(self.local(record.clients if measured is None else measured))
        return record

    def traffic(self, round: int, *, detail: bool = False) -> dict[str, Json]:
        """``bytes_up``/``bytes_down``/``bytes_cumulative`` (and ``bytes_detail`` by ``direction.kind``) of the round."""
        sent = self.ledger.round_totals(round)
        out: dict[str, Json] = {"bytes_up": sent["up"], "bytes_down": sent["down"], "bytes_cumulative": self.ledger.cumulative()["total"]}
        if detail:
            out["bytes_detail"] = {key: v for key, v in sent.items() if "." in key}
        return out

    def temperatures(self, used: Mapping[int, float]) -> dict[str, Json]:
        """The round's clients at the T they trained at, when T is per client: O(sampled), not O(registered)."""
        return {"temperatures": {str(cid): float(t) for cid, t in used.items()}} if self.per_client_temperature else {}

    def local(self, sampled: Sequence[int]) -> dict[str, Json]:
        """``local_acc``/``local_loss``/``local_clients``, the spread ``local_acc_std``/``local_acc_worst10``, and each client's under ``log.per_client`` (none when ``eval.clients = "none"``)."""
        return self.log.metrics(sampled, self.eval_clients, self.evaluation.config.log.per_client) if self.eval_clients != "none" else {}

    def due(self, round: int) -> bool:
        """Whether round ``round`` (0-based) evaluates the global model."""
        return self.evaluation.due(round + 1)

    def last(self, round: int) -> bool:
        """Whether round ``round`` (0-based) is the run's last. Skipped (Poisson sampling drew nobody, too few reported), it
        still evaluates the global model, unchanged since the last round that trained: otherwise the run's final accuracy
        would be that of an earlier evaluation (``eval.every`` > 1), not the saved model's."""
        return self.evaluation.last(round + 1)

    def evaluate(self, round: int, state: Mapping[str, torch.Tensor]) -> dict[str, Json]:
        """The global model's metrics on the test set when the round evaluates (else nothing); notes a model the server's step blew up."""
        if not self.due(round):
            return {}
        out = self.evaluation.metrics(state)
        loss = out.get("global_loss")
        if self.blown_after is None and isinstance(loss, float) and not math.isfinite(loss) and self.finite_locals.get(round, False):
            self.blown_after = round
        return out

    # ------------------------------------------------------------ state

    def state_dict(self) -> dict[str, Any]:
        """The policy, ledger and local log, and :attr:`blown_after`: a run resumed between the round whose server step
        blew the model up and the non-finite loss it causes gives the hint the uninterrupted run gives (it was lost).
        :attr:`finite_locals` is not kept: a round reads only its own entry, within the round."""
        return {"policy": self.policy.state_dict(), "ledger": self.ledger.state_dict(), "local": self.log.state_dict(), "blown_after": self.blown_after}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.ledger.load_state_dict(state["ledger"])
        self.log.load_state_dict(state["local"])
        blown = state.get("blown_after")  # a checkpoint before 2026-12-06 has none: the hint is lost, as it was then
        self.blown_after = None if blown is None else int(blown)

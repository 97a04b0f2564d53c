"""Aggregators' per-client state on the SuperNodes under Flower: FedBN, MOON, PA3Fed (SCAFFOLD: :mod:`chillfl.flower.scaffold`).

Under chillfl's own runtime these aggregators keep a table per client on the
server and send the client's part in its downlink. Under Flower the client
keeps it in its node's ``Context.state``, as on a device; the server's
stand-in (``NodeHeld*``) sends only the shared part and keeps no client
entry:

* **FedBN** (``chillfl.fedbn.<id>``, an ArrayRecord): the client's own
  batch-norm entries. The server sends the global model (the same bytes as
  chillfl's runtime, whose start holds the client's BN entries instead); the
  node puts its own BN entries into the start (none before the client's first
  round: the global ones, as :class:`~chillfl.aggregation.fedbn.FedBN` does)
  and stores the trained ones after the update. The uplink still carries the
  BN entries: FedBN's global model averages them (``global_bn = "average"``).
* **MOON** (``chillfl.moon.<id>``, an ArrayRecord): the client's model after
  its last update, the paper's w_i^{t-1}. The server sends ``moon_weight = mu``
  and the global model; the node adds ``moon_prev`` and sets the weight to 0
  while it has no previous model, as :class:`~chillfl.aggregation.moon.Moon`
  does (``moon_prev`` never counted as sent bytes, so the ledger is unchanged).
* **PA3Fed** (``chillfl.pa3fed.<id>``, a ConfigRecord ``score``): the
  client's score at its previous participation, s_i^{t-sigma}. As in PA3Fed's
  Algorithm 1 (lines 7-10) the client computes alpha_i (Eq. 10) itself and
  uploads it with its score and gradient norm (``report["alpha"]``, a float:
  no counted bytes, like the score); the server's period check and weighting
  are PA3Fed's own.

Each value is computed by the function chillfl's runtime uses, on the same
inputs, so a run stays bitwise equal. VRL-SGD cannot move this way: its
Delta_i update needs the round's new average model, which exists only after
aggregation on the server (refused by :func:`chillfl.flower.apps.check_supported`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Collection, Protocol, Sequence

import numpy as np
import torch

from chillfl.aggregation.base import Aggregator, ClientResult, Downlink, Params
from chillfl.aggregation.fedbn import FedBN
from chillfl.aggregation.moon import Moon
from chillfl.aggregation.pa3fed import PA3Fed, stability_coefficient
from chillfl.aggregation.scaffold import Scaffold
from chillfl.engine.protocol import ClientData, ClientReply, ClientTask
from chillfl.flower.scaffold import NodeHeldScaffold


class NodeState(Protocol):
    """A method's client state on a node: adjust the task before the update, store the new state after it."""

    def prepare_task(self, task: ClientTask[Any, Any], records: Any, data: ClientData) -> ClientTask[Any, Any]:
        ...

    def finish_task(self, task: ClientTask[Any, Any], reply: ClientReply[Any, Any], records: Any, data: ClientData) -> ClientReply[Any, Any]:
        ...


# --------------------------------------------------------------------------- server stand-ins


class NodeHeldFedBN(FedBN):
    """FedBN's server with no client BN entries: every client starts from the global model; the node swaps in its own."""

    def __init__(self, inner: FedBN) -> None:
        super().__init__(inner.bn_keys, inner.options)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink()

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        out = super().aggregate(global_params, results, round, weights)
        self.local_bn.clear()  # the nodes hold them
        return out


class NodeHeldMoon(Moon):
    """MOON's server with no previous models: it sends ``moon_weight = mu``; the node adds ``moon_prev`` (or weight 0)."""

    def __init__(self, inner: Moon) -> None:
        super().__init__(inner.options)

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(context={"moon_weight": self.options.mu, "moon_tau": self.options.tau, "moon_global": global_params}, local=("moon_global", "moon_prev"))

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        out = super().aggregate(global_params, results, round, weights)
        self.previous.clear()  # the nodes hold them
        return out


class NodeHeldPA3Fed(PA3Fed):
    """PA3Fed's server with no client scores: alpha_i comes from the client (Algorithm 1, line 8)."""

    def __init__(self, inner: PA3Fed, base: Aggregator) -> None:
        super().__init__(base, inner.options)

    def _alphas(self, results: Sequence[ClientResult]) -> dict[int, float]:
        alphas: dict[int, float] = {}
        for r in results:
            if "score" not in r.extras:
                if self.options.mode != "never":
                    raise ValueError(f"PA3Fed needs extras['score'] from every client (client {r.client_id})")
                continue
            alphas[r.client_id] = float(r.extras["alpha"])
        return alphas


def server_side(aggregator: Aggregator) -> Aggregator:
    """``aggregator`` with its client state handed to the nodes (unchanged when it keeps none)."""
    if isinstance(aggregator, PA3Fed):
        return NodeHeldPA3Fed(aggregator, server_side(aggregator.base))  # type: ignore[arg-type]
    if isinstance(aggregator, Scaffold):
        return NodeHeldScaffold(aggregator)
    if isinstance(aggregator, FedBN):
        return NodeHeldFedBN(aggregator)
    if isinstance(aggregator, Moon):
        return NodeHeldMoon(aggregator)
    return aggregator


def control_receiver(aggregator: Any) -> Callable[[int, Any], None] | None:
    """Where the nodes' SCAFFOLD deltas c_i+ - c_i go (:meth:`NodeHeldScaffold.receive`, also under PA3Fed); None: nowhere."""
    inner = aggregator.base if isinstance(aggregator, PA3Fed) else aggregator
    return inner.receive if isinstance(inner, NodeHeldScaffold) else None


# --------------------------------------------------------------------------- node side


@dataclasses.dataclass(frozen=True)
class NodeFedBN:
    """The node's side of FedBN: the client's own BN entries in ``chillfl.fedbn.<id>``."""

    bn_keys: Collection[str]

    def prepare_task(self, task: ClientTask[Any, Any], records: Any, data: ClientData) -> ClientTask[Any, Any]:
        own = load_params(records, f"chillfl.fedbn.{task.client_id}")
        if own is None:  # first round: the global BN entries
            return task
        d = task.downlink
        return dataclasses.replace(task, downlink=dataclasses.replace(d, start={**d.start, **own}))

    def finish_task(self, task: ClientTask[Any, Any], reply: ClientReply[Any, Any], records: Any, data: ClientData) -> ClientReply[Any, Any]:
        params = reply.uplink.params
        save_params(records, f"chillfl.fedbn.{task.client_id}", {k: params[k] for k in task.downlink.start if k in self.bn_keys})
        return reply


@dataclasses.dataclass(frozen=True)
class NodeMoon:
    """The node's side of MOON: the client's previous local model in ``chillfl.moon.<id>``."""

    def prepare_task(self, task: ClientTask[Any, Any], records: Any, data: ClientData) -> ClientTask[Any, Any]:
        d = task.downlink
        prev = load_params(records, f"chillfl.moon.{task.client_id}")
        weight = d.context["moon_weight"] if prev is not None else 0.0
        context = {**d.context, "moon_weight": weight, "moon_prev": prev if prev is not None else d.context["moon_global"]}
        return dataclasses.replace(task, downlink=dataclasses.replace(d, context=context))

    def finish_task(self, task: ClientTask[Any, Any], reply: ClientReply[Any, Any], records: Any, data: ClientData) -> ClientReply[Any, Any]:
        save_params(records, f"chillfl.moon.{task.client_id}", reply.uplink.params)
        return reply


@dataclasses.dataclass(frozen=True)
class NodePA3Fed:
    """The node's side of PA3Fed: s_i^{t-sigma} in ``chillfl.pa3fed.<id>``; alpha_i (Eq. 10) into the report."""

    beta: float
    signed: bool

    def prepare_task(self, task: ClientTask[Any, Any], records: Any, data: ClientData) -> ClientTask[Any, Any]:
        return task

    def finish_task(self, task: ClientTask[Any, Any], reply: ClientReply[Any, Any], records: Any, data: ClientData) -> ClientReply[Any, Any]:
        up = reply.uplink
        if "score" not in up.report:
            return reply
        from flwr.app import ConfigRecord

        key = f"chillfl.pa3fed.{task.client_id}"
        previous = float(records.config_records[key]["score"]) if key in records.config_records else None
        score = float(up.report["score"])
        alpha = stability_coefficient(previous, score, self.beta, signed=self.signed)
        records[key] = ConfigRecord({"score": score})
        return dataclasses.replace(reply, uplink=dataclasses.replace(up, report={**up.report, "alpha": alpha}))


def node_side(aggregator: Aggregator | None) -> list[NodeState]:
    """The node-side steps for ``aggregator``'s client state (SCAFFOLD's: :mod:`chillfl.flower.scaffold`)."""
    if isinstance(aggregator, PA3Fed):
        return [*node_side(aggregator.base), NodePA3Fed(aggregator.options.beta, aggregator.options.signed)]  # type: ignore[arg-type]
    if isinstance(aggregator, FedBN):
        return [NodeFedBN(frozenset(aggregator.bn_keys))]
    if isinstance(aggregator, Moon):
        return [NodeMoon()]
    return []


def load_params(records: Any, key: str) -> Params | None:
    """Tensors stored under ``key`` (an ArrayRecord, in their stored order); None when there are none."""
    if key not in records.array_records:
        return None
    arrays = records.array_records[key]
    return {k: torch.from_numpy(np.array(a.numpy(), copy=True)) for k, a in arrays.items()}


def save_params(records: Any, key: str, params: Params) -> None:
    from flwr.app import Array, ArrayRecord

    records[key] = ArrayRecord(array_dict={k: Array(v.detach().cpu().contiguous().numpy()) for k, v in params.items()})

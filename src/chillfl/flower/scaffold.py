"""SCAFFOLD under Flower with each client's control variate c_i on its SuperNode.

Under chillfl's own runtime the :class:`~chillfl.aggregation.scaffold.Scaffold`
aggregator keeps every c_i and sends ``correction = c - c_i``. Under Flower
c_i is the client's own, as on a device:

* server (:class:`NodeHeldScaffold`): the downlink carries the server control
  ``c`` (key ``scaffold_control``, as many bytes as the correction it
  replaces); the model update is Scaffold's own; the control update
  ``c <- c + (1/N) sum_S (c_i+ - c_i)`` uses the deltas the nodes send;
* node (:func:`prepare_task` / :func:`finish_task`): reads c_i from
  ``Context.state`` (zeros before the first participation), trains with
  ``correction = c - c_i``, then computes option II's
  ``c_i+ = c_i - c + (x - y_i) / (a(K) * eta_l)`` (the same expression, in the same
  float order, as Scaffold.aggregate), stores c_i+ and returns c_i+ - c_i.

Every operation is the one chillfl's runtime performs, on bit-identical
inputs, so the run stays bitwise equal. The ledger counts bytes as chillfl's
runtime does: the delta a node sends back travels next to the typed reply
and is not counted in ``bytes_up`` (chillfl's runtime sends none).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from chillfl.aggregation.base import ClientResult, Downlink, Params
from chillfl.aggregation.fednova import effective_steps
from chillfl.aggregation.scaffold import Scaffold
from chillfl.engine.protocol import ClientReply, ClientTask
from chillfl.protocols.parameters import ParamDownlink

CONTROL = "scaffold_control"
"""The downlink context key of the server control ``c`` (the node turns it into ``correction``)."""
PREFIX = "chillfl.scaffold."


class NodeHeldScaffold(Scaffold):
    """SCAFFOLD's server with no c_i: it sends ``c`` and takes the nodes' c_i+ - c_i (module docstring)."""

    def __init__(self, inner: Scaffold) -> None:
        super().__init__(inner.num_clients, inner.options, inner.param_keys)
        if inner.client_controls:
            raise ValueError("a SCAFFOLD server that already holds client controls cannot hand them to the nodes")
        self.control = inner.control
        self.deltas: dict[int, Params] = {}

    def downlink(self, client_id: int, round: int, global_params: Params) -> Downlink:
        return Downlink(context={CONTROL: self._control(global_params)})

    def receive(self, client_id: int, delta: Params) -> None:
        """Client ``client_id``'s c_i+ - c_i from its node, for this round's :meth:`aggregate`."""
        self.deltas[client_id] = delta

    def aggregate(self, global_params: Params, results: Sequence[ClientResult], round: int, weights: torch.Tensor | None = None) -> Params:
        c = self._control(global_params)
        out = super().aggregate(global_params, results, round, weights)  # the model update (its control update is redone below)
        self.client_controls = {}
        delta_c = {k: torch.zeros_like(v) for k, v in c.items()}
        for r in results:
            delta = self.deltas.pop(r.client_id)
            for k in c:
                delta_c[k] += delta[k]
        self.control = {k: c[k] + delta_c[k] / self.num_clients for k in c}
        return out


def uses_node_controls(task: ClientTask[Any, Any]) -> bool:
    return isinstance(task.downlink, ParamDownlink) and CONTROL in task.downlink.context


def prepare_task(task: ClientTask[Any, Any], records: Any) -> ClientTask[Any, Any]:
    """The task with ``correction = c - c_i`` in place of ``c`` (c_i from the node's records)."""
    import dataclasses

    d = task.downlink
    c: Params = d.context[CONTROL]
    c_i = load_control(records, task.client_id, c)
    context = {k: v for k, v in d.context.items() if k != CONTROL}
    context["correction"] = {k: c[k] - c_i[k] for k in c}
    return dataclasses.replace(task, downlink=dataclasses.replace(d, context=context))


def finish_task(task: ClientTask[Any, Any], reply: ClientReply[Any, Any], records: Any, momentum: float) -> Params:
    """Option II on the node: store c_i+ in ``records``, return c_i+ - c_i (``task``: as the server sent it)."""
    d, up = task.downlink, reply.uplink
    c: Params = d.context[CONTROL]
    c_i = load_control(records, task.client_id, c)
    scale = effective_steps(up.num_steps, momentum) * d.lr
    new_c_i = {k: c_i[k] - c[k] + (d.start[k] - up.params[k]) / scale for k in c}
    save_control(records, task.client_id, new_c_i)
    return {k: new_c_i[k] - c_i[k] for k in c}


def load_control(records: Any, cid: int, like: Mapping[str, torch.Tensor]) -> Params:
    """c_i from ``records`` (zeros shaped like ``like`` before the client's first update)."""
    key = f"{PREFIX}{cid}"
    if key not in records.array_records:
        return {k: torch.zeros_like(v) for k, v in like.items()}
    arrays = records.array_records[key]
    return {k: torch.from_numpy(np.array(arrays[k].numpy(), copy=True)) for k in like}


def save_control(records: Any, cid: int, control: Params) -> None:
    from flwr.app import Array, ArrayRecord

    records[f"{PREFIX}{cid}"] = ArrayRecord(array_dict={k: Array(v.detach().cpu().contiguous().numpy()) for k, v in control.items()})

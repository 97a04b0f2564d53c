"""FedChill under Flower with each client's temperature state on its SuperNode.

Under chillfl's own runtime :class:`~chillfl.temperature.fedchill.FedChillPolicy`
lives on the server: it computes every client's heterogeneity h_n from the
federation's class counts, the start temperature of Eq. 7, and keeps
Algorithm 1's state (T, accuracy history A_n, stagnation counter) of every
client, updated by ``observe``. Under Flower that state is the client's own,
as on a device:

* node (:class:`NodeTemperature`): computes h_n from its client's own label
  counts (:func:`~chillfl.temperature.heterogeneity.client_heterogeneity`),
  keeps Algorithm 1's state in ``Context.state`` (a ConfigRecord
  ``chillfl.temperature.<id>``: ``temperature``, ``history``, ``counter``;
  Python floats, kept as they are), sets the task's training temperature
  from it before the update and runs
  :func:`~chillfl.temperature.fedchill.decay_step` after it with the reply's
  ``local_acc``; the reply says the temperature the client trained at
  (``ClientReply.temperature``), which the server records;
* server (:class:`NodeHeldTemperature`): stands in for the policy. It holds
  no per-client state and never sees a class count. Its downlink
  temperature is NaN: a placeholder the node always overwrites (a number
  would look like a temperature the server chose; NaN, were it ever used,
  makes the training loss NaN and chillfl's finite-loss check stop the run).

Every value is computed by the same functions, on the same inputs, as under
chillfl's runtime (h_n per client is the same float as the federation's row,
see ``client_heterogeneity``), so the run stays bitwise equal.

What needs the whole federation cannot be computed on a node: with
``init = true``, ``normalisation = "minmax"`` or ``measure = "size"`` is
refused (:func:`check_node_computable`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from chillfl.config import RunConfig
from chillfl.engine.protocol import ClientData, ClientReply, ClientTask
from chillfl.errors import ConfigError
from chillfl.options import parse_options
from chillfl.temperature.fedchill import ClientTemperatureState, FedChillOptions, decay_step, no_accuracy_for_decay, start_temperature
from chillfl.temperature.heterogeneity import FEDERATION_MEASURES, client_heterogeneity, reference_distribution

PREFIX = "chillfl.temperature."
RUNTIME = "run it with chillfl's own runtime (chillfl run; executor = \"ray\" for a cluster)"


def fedchill_options(config: RunConfig) -> FedChillOptions | None:
    """The run's FedChill options (validated), None when its temperature policy keeps no per-client state."""
    table = config.temperature
    if table.get("policy") != "fedchill":
        return None
    return parse_options(FedChillOptions, {k: v for k, v in table.items() if k != "policy"}, "temperature")


def check_node_computable(options: FedChillOptions) -> None:
    """A one-line ConfigError when a node cannot compute its client's h_n from its own counts alone."""
    if not options.init:
        return  # every client starts at t_start / t_max: h_n is not used
    if options.normalisation == "minmax":
        raise ConfigError("temperature.normalisation", f"'minmax' rescales h_n over every client's counts, which no Flower node sees; use 'max' or {RUNTIME}")
    if options.measure in FEDERATION_MEASURES:
        raise ConfigError("temperature.measure", f"{options.measure!r} is normalised by the federation's largest client, which no Flower node sees; {RUNTIME}")


class NodeHeldTemperature:
    """The Flower server's FedChill policy: no per-client state, no class counts (module docstring).

    Implements :class:`~chillfl.temperature.base.TemperaturePolicy`.
    """

    def __init__(self, options: FedChillOptions, num_classes: int) -> None:
        check_node_computable(options)
        reference_distribution(options.p_g, num_classes)  # len(p_g) == classes, as FedChillPolicy checks
        self.options = options

    def temperature(self, client_id: int, round: int) -> float:
        return math.nan  # the node sets the client's own T

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        """Nothing to update here (the node ran Algorithm 1); FedChillPolicy's error when the decay has no accuracy."""
        if self.options.decay and local_accuracy is None:
            raise no_accuracy_for_decay()

    def snapshot(self) -> Mapping[int, float]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state:
            raise ValueError("a Flower run keeps FedChill's temperature states on the SuperNodes; the server cannot load them")


@dataclass(frozen=True)
class NodeTemperature:
    """The node's side of FedChill: each client's Algorithm 1 state in ``Context.state`` (module docstring)."""

    options: FedChillOptions
    num_classes: int

    def state(self, records: Any, cid: int, data: ClientData) -> ClientTemperatureState:
        """Client ``cid``'s state from ``records``; before its first decay step, its start temperature (Eq. 7 from its training labels)."""
        saved = load_state(records, cid)
        if saved is not None:
            return saved
        o = self.options
        h = client_heterogeneity(np.bincount(data.y.cpu().numpy(), minlength=self.num_classes), o.measure, o.p_g) if o.init else math.nan
        return ClientTemperatureState(temperature=start_temperature(o, h))

    def prepare_task(self, task: ClientTask[Any, Any], records: Any, data: ClientData) -> ClientTask[Any, Any]:
        """The task with the client's own training temperature in its downlink."""
        t = self.state(records, task.client_id, data).temperature
        return dataclasses.replace(task, downlink=dataclasses.replace(task.downlink, temperature=t))

    def finish_task(self, task: ClientTask[Any, Any], reply: ClientReply[Any, Any], records: Any, data: ClientData) -> ClientReply[Any, Any]:
        """Algorithm 1 after the update (stored in ``records``); the reply says the temperature the client trained at."""
        o = self.options
        state = self.state(records, task.client_id, data)
        if o.decay and reply.local_acc is not None:  # without an accuracy the server stops the run (NodeHeldTemperature.observe)
            save_state(records, task.client_id, decay_step(state, reply.local_acc, patience=o.patience, gamma=o.gamma, t_min=o.t_min, compare=o.compare))
        return dataclasses.replace(reply, temperature=state.temperature)


def load_state(records: Any, cid: int) -> ClientTemperatureState | None:
    """Client ``cid``'s Algorithm 1 state from ``records`` (None: no decay step has run yet)."""
    key = f"{PREFIX}{cid}"
    if key not in records.config_records:
        return None
    r = records.config_records[key]
    return ClientTemperatureState(temperature=float(r["temperature"]), history=[float(a) for a in r["history"]], counter=int(r["counter"]))


def save_state(records: Any, cid: int, state: ClientTemperatureState) -> None:
    from flwr.app import ConfigRecord

    records[f"{PREFIX}{cid}"] = ConfigRecord({"temperature": float(state.temperature), "history": [float(a) for a in state.history], "counter": int(state.counter)})

"""chillfl's typed messages <-> Flower records, bit for bit.

A message (a tree of dataclasses, dicts, lists, tensors and scalars) becomes
a :class:`flwr.app.RecordDict` of two records: ``arrays`` (an
:class:`~flwr.app.ArrayRecord`, every tensor as its raw bytes, dtype and
shape) and ``meta`` (a :class:`~flwr.app.ConfigRecord` holding the tree's
structure as JSON, where a tensor is a reference into ``arrays``). Floats
travel as JSON numbers written with Python's ``repr``, which reads back to
the same double, and tensors as their bytes, so a round trip is exact.

Only the dataclasses registered in :data:`MESSAGES` are rebuilt on the
receiving side: nothing in a message can name code to run (no pickle).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from chillfl.errors import ConfigError, DataAbsent, MissingExtra, json_loads, rebuilt_error
from chillfl.protocols.softlabels.messages import CacheSyncDelta, SoftLabelDownlink, SoftLabelReport, SoftLabelRoundDownlink, SoftLabelUplink
from chillfl.engine.protocol import ClientReply, ClientTask
from chillfl.protocols.parameters import ParamDownlink, ParamUplink
from chillfl.training.terms import ContextError, TermError


@dataclass(frozen=True)
class StatesRequest:
    """The server's ask, after the last round, for the states a node holds of ``client_ids`` (``checkpoint.client_models``);
    the node answers with them in its ``Context.state``'s own records (:func:`chillfl.flower.state.client_states_record`)."""

    client_ids: list[int]


REFUSALS: dict[str, type[ConfigError]] = {cls.__name__: cls for cls in (ConfigError, MissingExtra, DataAbsent, ContextError, TermError)}
"""The :class:`~chillfl.errors.ConfigError` classes a node's refusal is raised again as, by name: a closed list, so that
a message never names a class to import. Why the subclasses: the CLI says a :class:`~chillfl.errors.MissingExtra` in its
own line naming the extra, and a dry run tells a :class:`~chillfl.errors.DataAbsent` apart; sent as a plain
ConfigError, a node without a package said ``<extra>: <message>`` as a bad config value."""


@dataclass(frozen=True)
class Refusal:
    """A node's :class:`~chillfl.errors.ConfigError` (bad input only a client sees: a loss term's shape, a client half's
    state), sent back as a reply: the attributes the error is rebuilt from (``ConfigError.__reduce__``'s), so that the
    server raises it again as one line naming the field, as the Ray executor re-raises its actors' (unpickled there; a
    Flower message carries no pickle). Raised by Flower instead, it came back as a WorkerError holding the node's whole
    traceback, the field lost. Made by :meth:`of`, raised again as :meth:`error`."""

    field: str
    message: str
    kind: str = "ConfigError"
    """The error's class: the nearest of its classes in :data:`REFUSALS` (a plugin's own subclass: the one it derives from)."""
    attributes: dict[str, str] = dataclasses.field(default_factory=dict)
    """Its other public text attributes (a MissingExtra's ``what``, ``module``, ``extra``); any other kind of value stays on the node."""

    @classmethod
    def of(cls, error: ConfigError) -> Refusal:
        """``error`` as a reply's refusal."""
        kind = next(c.__name__ for c in type(error).__mro__ if REFUSALS.get(c.__name__) is c)  # ConfigError at the latest
        attributes = {k: v for k, v in vars(error).items() if _sent(k) and isinstance(v, str)}
        return cls(error.field, error.message, kind, attributes)

    def error(self) -> ConfigError:
        """The node's error as it was raised there: its class (of :data:`REFUSALS`; another, a newer node's: ConfigError),
        field, message and text attributes."""
        given = self.attributes if isinstance(self.attributes, dict) else {}  # as decoded: whatever the node sent
        state: dict[str, object] = {k: v for k, v in given.items() if _sent(k) and isinstance(v, str)}
        kind = REFUSALS.get(self.kind, ConfigError) if isinstance(self.kind, str) else ConfigError
        return rebuilt_error(kind, {**state, "field": str(self.field), "message": str(self.message)})


@dataclass(frozen=True)
class ClientFailure:
    """A node's client update that raised in the client's own code (a loss term, a training step: not a ConfigError),
    sent back as a reply: the exception's ``Type: message`` line, which the server raises as a
    :class:`~chillfl.executors.processes.ClientCodeError`, as the Ray and process executors raise a worker's. Raised by
    Flower instead, it came back as an error reply, which the server cannot tell from a lost node's: a WorkerError, said
    as a lost worker. The node logs the traceback where it runs."""

    error: str
    client_id: int | None = None
    """The client whose update raised (None from a node that does not say: the server then names the node's clients)."""
    out_of_memory: bool = False
    """Whether it was an allocation failure (``processes.out_of_memory``): the node's limit, which the server raises as a
    lost worker's :class:`~chillfl.executors.processes.WorkerError`, not the client's code."""


def _sent(attribute: object) -> bool:
    """Whether a refusal carries ``attribute`` of its error: a public name other than the two it always carries."""
    return isinstance(attribute, str) and attribute.isidentifier() and not attribute.startswith("_") and attribute not in ("field", "message")


MESSAGES: dict[str, type] = {
    cls.__name__: cls
    for cls in (
        StatesRequest,  # the clients' states, asked once at the end
        Refusal,  # a node's ConfigError
        ClientFailure,  # a node's client code raised
        ClientTask, ClientReply,
        ParamDownlink, ParamUplink,  # parameter sharing
        SoftLabelRoundDownlink, SoftLabelDownlink, CacheSyncDelta, SoftLabelReport, SoftLabelUplink,  # soft-label sharing
    )
}
"""The dataclasses a message may contain: the task/reply envelopes and each carried protocol's downlink and uplink."""


def encode(tree: Any) -> Any:
    """``tree`` as a RecordDict (``arrays`` + ``meta``)."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    arrays: dict[str, Any] = {}

    def enc(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            key = str(len(arrays))
            arrays[key] = Array(x.detach().cpu().contiguous().numpy())
            return {"t": key}
        if isinstance(x, (bool, int, float, str)) or x is None:
            return x
        if isinstance(x, np.generic):
            return x.item()
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            name = type(x).__name__
            if MESSAGES.get(name) is not type(x):
                raise TypeError(f"{name} is not a registered chillfl message (chillfl.flower.wire.MESSAGES)")
            return {"c": name, "f": {f.name: enc(getattr(x, f.name)) for f in dataclasses.fields(x)}}
        if isinstance(x, dict) or hasattr(x, "items"):
            return {"d": [[enc(k), enc(v)] for k, v in x.items()]}
        if isinstance(x, (list, tuple)):
            return {"l" if isinstance(x, list) else "u": [enc(v) for v in x]}
        raise TypeError(f"cannot send a {type(x).__name__} in a Flower message")

    structure = json.dumps(enc(tree))
    return RecordDict({"arrays": ArrayRecord(array_dict=arrays), "meta": ConfigRecord({"tree": structure})})


def decode(content: Any) -> Any:
    """The tree :func:`encode` wrote into ``content`` (a RecordDict); ValueError for a damaged or hostile one (a class
    not in :data:`MESSAGES`, a tree nested past :data:`~chillfl.errors.MAX_JSON_DEPTH`: read with
    :func:`~chillfl.errors.json_loads`, as a file is, so Python's recursion limit decides nothing)."""
    arrays = content.array_records["arrays"]
    structure = json_loads(str(content.config_records["meta"]["tree"]))

    def dec(x: Any) -> Any:
        if not isinstance(x, dict):
            return x
        if "t" in x:
            return torch.from_numpy(np.array(arrays[x["t"]].numpy(), copy=True))
        if "c" in x:
            cls = MESSAGES.get(x["c"])
            if cls is None:
                raise ValueError(f"unknown message class {x['c']!r}")
            return cls(**{k: dec(v) for k, v in x["f"].items()})
        if "d" in x:
            return {_key(dec(k)): dec(v) for k, v in x["d"]}
        if "l" in x:
            return [dec(v) for v in x["l"]]
        if "u" in x:
            return tuple(dec(v) for v in x["u"])
        raise ValueError(f"malformed message node {sorted(x)}")

    return dec(structure)


def _key(k: Any) -> Any:
    return tuple(k) if isinstance(k, list) else k

"""A client's state between rounds, kept on its SuperNode in Flower's ``Context.state``.

Under Flower the server holds no client state: whatever a protocol's client
update returns as the client's next state stays on the node that serves the
client, as on a device. That is the soft-label protocol's
:class:`~chillfl.protocols.softlabels.ClientState` (model, SCARLET cache C_k,
the method's own state, FedChill's temperature entries) and the parameter-sharing
protocol's name -> tensor table (:data:`~chillfl.aggregation.base.ClientState`:
SCAFFOLD's c_i, FedBN's BN entries, MOON's previous model, PA3Fed's score,
FedChill's T, accuracy history and stagnation counter), each method's part
under its own prefix. Nothing here knows a method. Flower persists a
node's ``Context.state`` (a :class:`flwr.app.RecordDict`) between the
messages of a run, in the simulation engine and on a deployed SuperNode
alike, so the state lives there as two records per client:

* ``chillfl.client.<id>``: an ArrayRecord of tensors (``model.<name>``,
  ``cache_indices``, ``cache_values``, ``method.<name>``, ``own.<name>``
  for FedChill's entries; or ``own.<name>`` for a parameter-sharing table,
  FedChill's ``fedchill.*`` entries included), raw bytes;
* ``chillfl.client.<id>.meta``: a ConfigRecord (the kind of state, the key
  order, the cache's sync round).

The soft-label round trip goes through :meth:`ClientState.to_payload` /
:meth:`ClientState.from_payload` (the disk store's format); a table is stored
tensor by tensor in its key order. Both are exact.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from chillfl.errors import json_loads
from chillfl.aggregation.base import Params
from chillfl.protocols.softlabels.state import ClientPayload, ClientState

PREFIX = "chillfl.client."


def _arrays_key(cid: int) -> str:
    return f"{PREFIX}{cid}"


def save_client_state(records: Any, cid: int, state: ClientState | Params) -> None:
    """Write ``state`` of client ``cid`` into ``records`` (a node's ``Context.state``), replacing the last one."""
    from flwr.app import Array, ArrayRecord, ConfigRecord

    if isinstance(state, dict):  # a parameter-sharing client's table
        records[_arrays_key(cid)] = ArrayRecord(array_dict={f"own.{k}": Array(_numpy(v)) for k, v in state.items()})
        records[_arrays_key(cid) + ".meta"] = ConfigRecord({"kind": "table", "keys": json.dumps(list(state))})
        return
    payload = state.to_payload()
    model, own = payload["model"], payload.get("own", {})
    arrays = {f"model.{name}": Array(_numpy(v)) for name, v in model.items()}
    arrays.update({f"own.{name}": Array(_numpy(v)) for name, v in own.items()})
    meta: dict[str, Any] = {"model_keys": json.dumps(list(model)), "own_keys": json.dumps(list(own)), "cache_synced": payload.get("cache_synced", -2)}
    if "cache_indices" in payload:
        arrays["cache_indices"], arrays["cache_values"] = Array(_numpy(payload["cache_indices"])), Array(_numpy(payload["cache_values"]))
    if "method" in payload:  # the method's own state, as named tensors
        arrays.update({f"method.{name}": Array(_numpy(v)) for name, v in payload["method"].items()})
        meta["method_keys"] = json.dumps(list(payload["method"]))
    records[_arrays_key(cid)] = ArrayRecord(array_dict=arrays)
    records[_arrays_key(cid) + ".meta"] = ConfigRecord(meta)


def load_client_state(records: Any, cid: int) -> ClientState | Params | None:
    """Client ``cid``'s state from ``records`` (None: the client has not run on this node yet). Its key lists are read
    with :func:`~chillfl.errors.json_loads`: a damaged record's is a ValueError, whatever Python's recursion limit."""
    key = _arrays_key(cid)
    if key not in records.array_records:
        return None
    arrays = records.array_records[key]
    meta = records.config_records[key + ".meta"]
    if "kind" in meta and meta["kind"] == "table":
        return {name: _tensor(arrays[f"own.{name}"]) for name in json_loads(str(meta["keys"]))}
    payload: ClientPayload = {"model": {name: _tensor(arrays[f"model.{name}"]) for name in json_loads(str(meta["model_keys"]))}}
    synced = int(meta["cache_synced"])
    if synced != -2:  # -2: the client keeps no cache
        payload["cache_synced"] = synced
        payload["cache_indices"] = _tensor(arrays["cache_indices"])
        payload["cache_values"] = _tensor(arrays["cache_values"])
    if "method_keys" in meta:
        payload["method"] = {name: _tensor(arrays[f"method.{name}"]) for name in json_loads(str(meta["method_keys"]))}
    own = json_loads(str(meta["own_keys"])) if "own_keys" in meta else []
    if own:
        payload["own"] = {name: _tensor(arrays[f"own.{name}"]) for name in own}
    return ClientState.from_payload(cid, payload)


def client_states_record(records: Any, client_ids: list[int]) -> Any:
    """A :class:`flwr.app.RecordDict` holding the states of ``client_ids`` as ``records`` (a node's ``Context.state``)
    holds them: the reply that brings them to the server at the end of a run (``checkpoint.client_models``), read back
    there with :func:`load_client_state`, bit for bit. A client without a state on this node is left out."""
    from flwr.app import RecordDict

    out = RecordDict()
    for cid in client_ids:
        key = _arrays_key(cid)
        if key in records.array_records:
            out[key], out[key + ".meta"] = records.array_records[key], records.config_records[key + ".meta"]
    return out


def held_clients(records: Any) -> list[int]:
    """Ids of the clients whose state ``records`` holds, sorted."""
    return sorted(int(k[len(PREFIX):]) for k in records.array_records if k.startswith(PREFIX))


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy()


def _tensor(array: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(array.numpy(), copy=True))

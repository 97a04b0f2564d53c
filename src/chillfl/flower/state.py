"""A client's state between rounds, kept on its SuperNode in Flower's ``Context.state``.

Under Flower the server holds no client state: a client's model, its
SCARLET cache C_k and its selector mask (:class:`~chillfl.protocols.softlabels.ClientState`)
stay on the node that serves the client, as on a device. Flower persists a
node's ``Context.state`` (a :class:`flwr.app.RecordDict`) between the
messages of a run, in the simulation engine and on a deployed SuperNode
alike, so the state lives there as two records per client:

* ``chillfl.client.<id>``: an ArrayRecord of tensors (``model.<name>``,
  ``cache_indices``, ``cache_values``, ``in_distribution``), raw bytes;
* ``chillfl.client.<id>.meta``: a ConfigRecord (the model's key order, the
  cache's sync round).

The round trip goes through :meth:`ClientState.to_payload` /
:meth:`ClientState.from_payload` (the disk store's format), so it is exact.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch

from chillfl.protocols.softlabels import ClientState

PREFIX = "chillfl.client."


def _arrays_key(cid: int) -> str:
    return f"{PREFIX}{cid}"


def save_client_state(records: Any, cid: int, state: ClientState) -> None:
    """Write ``state`` of client ``cid`` into ``records`` (a node's ``Context.state``), replacing the last one."""
    from flwr.app import Array, ArrayRecord, ConfigRecord

    payload = state.to_payload()
    model: dict[str, torch.Tensor] = payload.pop("model")
    arrays = {f"model.{name}": Array(_numpy(v)) for name, v in model.items()}
    meta: dict[str, Any] = {"model_keys": json.dumps(list(model)), "cache_synced": int(payload.pop("cache_synced", -2))}
    for name, value in payload.items():  # cache_indices, cache_values, in_distribution
        arrays[name] = Array(_numpy(value))
    records[_arrays_key(cid)] = ArrayRecord(array_dict=arrays)
    records[_arrays_key(cid) + ".meta"] = ConfigRecord(meta)


def load_client_state(records: Any, cid: int) -> ClientState | None:
    """Client ``cid``'s state from ``records`` (None: the client has not run on this node yet)."""
    key = _arrays_key(cid)
    if key not in records.array_records:
        return None
    arrays = records.array_records[key]
    meta = records.config_records[key + ".meta"]
    payload: dict[str, Any] = {"model": {name: _tensor(arrays[f"model.{name}"]) for name in json.loads(str(meta["model_keys"]))}}
    synced = int(meta["cache_synced"])
    if synced != -2:  # -2: the client keeps no cache
        payload["cache_synced"] = synced
        payload["cache_indices"] = _tensor(arrays["cache_indices"])
        payload["cache_values"] = _tensor(arrays["cache_values"])
    if "in_distribution" in arrays:
        payload["in_distribution"] = _tensor(arrays["in_distribution"])
    return ClientState.from_payload(cid, payload)


def held_clients(records: Any) -> list[int]:
    """Ids of the clients whose state ``records`` holds, sorted."""
    return sorted(int(k[len(PREFIX):]) for k in records.array_records if k.startswith(PREFIX))


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().contiguous().numpy()


def _tensor(array: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(array.numpy(), copy=True))

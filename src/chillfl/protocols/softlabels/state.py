"""What a soft-label client keeps between rounds, and its plain-tensor form for stores, checkpoints and Flower nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import torch

from .cache import ClientCache
from .messages import CacheSyncDelta
from .method import MethodState, StoredState

Params = dict[str, torch.Tensor]


class _Model(TypedDict):
    model: Params


class ClientPayload(_Model, total=False):
    """A :class:`ClientState` as plain tensors and ints: the disk store's, the checkpoint's and the Flower node's format.

    Only ``model`` is always there; ``own`` when the temperature policy keeps entries, the three
    ``cache_*`` keys when the client keeps a synchronized cache (``cache_synced`` -1: never synced),
    ``method`` when the method's client half keeps a state (its :meth:`~.method.MethodState.to_tensors`).
    """

    own: dict[str, torch.Tensor]
    cache_indices: torch.Tensor
    cache_values: torch.Tensor
    cache_synced: int
    method: dict[str, torch.Tensor]


@dataclass
class ClientState:
    """Everything a client keeps between rounds: its model, its cache C_k, its method's own state, its temperature."""

    model: Params
    cache: ClientCache | None = None
    method: MethodState | None = None
    """The method's client half's state (None until the client's first collaborative round)."""
    own: dict[str, torch.Tensor] = field(default_factory=dict)
    """The temperature policy's client half's entries (a per-client temperature; empty: none)."""

    def to_payload(self) -> ClientPayload:
        """Plain tensors/ints only, so ``torch.load(weights_only=True)`` reads it back."""
        out: ClientPayload = {"model": self.model}
        if self.own:
            out["own"] = dict(self.own)
        if self.cache is not None:
            entries = self.cache.entries()
            keys = sorted(entries)
            out["cache_indices"] = torch.tensor(keys, dtype=torch.long)
            out["cache_values"] = torch.stack([entries[i] for i in keys]) if keys else torch.zeros((0, 0))
            out["cache_synced"] = -1 if self.cache.synced_round is None else int(self.cache.synced_round)
        if self.method is not None:
            out["method"] = self.method.to_tensors()
        return out

    @classmethod
    def from_payload(cls, cid: int, payload: ClientPayload) -> "ClientState":
        """The state back; the method's part as a :class:`~.method.StoredState` its client half makes typed again."""
        cache = None
        if "cache_indices" in payload:
            cache = ClientCache(cid)
            synced = int(payload["cache_synced"])
            if synced >= 0:  # restore through the public catch-up API
                cache.apply_sync(
                    CacheSyncDelta(cid, synced, payload["cache_indices"], payload["cache_values"], torch.zeros(0, dtype=torch.long))
                )
        method = StoredState(dict(payload["method"])) if "method" in payload else None
        return cls(payload["model"], cache, method, dict(payload.get("own", {})))

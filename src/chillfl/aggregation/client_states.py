"""Per-client parameter tables kept between rounds, compactly and off the device while the client is idle.

SCAFFOLD's c_i, VRL-SGD's Delta_i, MOON's previous model and FedBN's own
batch-norm entries exist only for clients that have been sampled, so the
server's memory grows with the clients that have state, never with the
clients registered. :class:`ClientParams` stores each such table as one flat
buffer per dtype on the CPU (``storage``), made safetensors-able by
:meth:`ClientParams.flat`, and hands it back on the run's device when the
client is sampled again.

Choices
-------
* A stored table is a copy: it never keeps alive the tensor it came from (a
  trained client's state is a view of the vectorised executor's stacked
  chunk, which would otherwise stay in memory as long as any one of its
  clients is remembered).
* Each tensor comes back with its shape *and* memory layout (strides), so a
  run with the store is bitwise the run without it: layouts decide the order
  in which reductions downstream add up.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass

import torch

Params = dict[str, torch.Tensor]


@dataclass(frozen=True)
class _Slot:
    """Where one tensor lives in its dtype's flat buffer, and its shape, strides and device."""

    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device


def _dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a tensor whose elements fill its storage span without gaps (a copy only when they do not)."""
    if t.numel() == 0:
        return t.contiguous()
    span = 1 + sum((size - 1) * step for size, step in zip(t.shape, t.stride()))
    return t if span == t.numel() and all(s >= 0 for s in t.stride()) else t.contiguous()


class ClientParams(MutableMapping[int, Params]):
    """client id -> name -> tensor, stored flat per client on ``storage`` (default the CPU); see the module docstring."""

    def __init__(self, storage: torch.device | str = "cpu") -> None:
        self.storage = torch.device(storage)
        self._buffers: dict[int, dict[torch.dtype, torch.Tensor]] = {}
        self._slots: dict[int, dict[str, _Slot]] = {}

    def __setitem__(self, cid: int, params: Mapping[str, torch.Tensor]) -> None:
        parts: dict[torch.dtype, list[torch.Tensor]] = {}
        sizes: dict[torch.dtype, int] = {}
        slots: dict[str, _Slot] = {}
        for name, value in params.items():
            t = _dense(value.detach())
            flat = torch.as_strided(t, (t.numel(),), (1,), t.storage_offset()) if t.numel() else t.reshape(0)  # memory order
            slots[name] = _Slot(sizes.get(t.dtype, 0), tuple(t.shape), tuple(t.stride()), t.dtype, value.device)
            parts.setdefault(t.dtype, []).append(flat)
            sizes[t.dtype] = sizes.get(t.dtype, 0) + t.numel()
        self._buffers[int(cid)] = {dtype: torch.cat([p.to(self.storage) for p in chunks]) for dtype, chunks in parts.items()}
        self._slots[int(cid)] = slots

    def __getitem__(self, cid: int) -> Params:
        buffers, slots = self._buffers[int(cid)], self._slots[int(cid)]
        on_device: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        out: Params = {}
        for name, slot in slots.items():
            key = (slot.dtype, slot.device)
            if key not in on_device:
                on_device[key] = buffers[slot.dtype].to(slot.device)  # one transfer per dtype, not per tensor
            out[name] = torch.as_strided(on_device[key], slot.shape, slot.stride, slot.offset)
        return out

    def __delitem__(self, cid: int) -> None:
        del self._buffers[int(cid)], self._slots[int(cid)]

    def clear(self) -> None:
        self._buffers.clear()
        self._slots.clear()

    def __iter__(self) -> Iterator[int]:
        return iter(self._buffers)

    def __len__(self) -> int:
        return len(self._buffers)

    def __contains__(self, cid: object) -> bool:
        return cid in self._buffers

    def nbytes(self) -> int:
        """Bytes of every stored buffer: what the clients with state cost."""
        return sum(b.numel() * b.element_size() for bufs in self._buffers.values() for b in bufs.values())

    def flat(self, cid: int) -> dict[str, torch.Tensor]:
        """Client ``cid``'s buffers as ``{dtype name: 1-D tensor}`` (e.g. for ``safetensors``)."""
        return {str(dtype).removeprefix("torch."): b for dtype, b in self._buffers[int(cid)].items()}

    @classmethod
    def of(cls, tables: Mapping[int, Mapping[str, torch.Tensor]], storage: torch.device | str = "cpu") -> ClientParams:
        """A store holding copies of ``tables`` (in their order)."""
        store = cls(storage)
        for cid, params in tables.items():
            store[cid] = params
        return store


"""Every client's row indices into one pool, stored compactly: what makes 100,000 registered clients cheap.

A list of one NumPy array per client costs about 100 bytes of object overhead
per client before a single index is stored, and building it is a Python loop
over every registered client. :class:`ClientRows` keeps the same information in
two flat arrays, whatever the number of clients:

* ``ranges``: client ``c`` owns the contiguous rows ``[starts[c], starts[c] + lengths[c])``
  (16 bytes per client; a client's rows are then a *view* of the pool, no copy);
* ``csr``: client ``c`` owns ``flat[offsets[c]:offsets[c + 1]]`` (any rows, 8 bytes per
  index plus 8 per client; ``flat`` may be a memory-mapped ``.npy``).

It is a read-only ``Sequence[np.ndarray]``: ``rows[c]``, ``len(rows)`` and
iteration give what the list of arrays gave, so code written for lists keeps
working; :meth:`ClientRows.lengths` and :meth:`ClientRows.class_counts` answer
for every client at once without a Python loop.

Many registered clients over one small pool (the benchmark's workload 4: 100,000
clients x 50 samples over a 50,000-sample pool) is :meth:`ClientRows.tiled`:
client ``c`` owns rows ``[(c * n) mod pool, ... + n)``, so clients ``c`` and
``c + pool / n`` share their rows, and nothing per client is allocated beyond
the two arrays.

Checked against the list-of-arrays form it replaces (:class:`chillfl.data.partition.Partition`'s
``client_indices``): ``rows[c]``, ``lengths()`` and ``class_counts()`` give what
``len`` and ``np.bincount`` over each client's array give, for ranges and csr
alike, 2026-12-02.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np


CSR_BLOCK = 1 << 20
"""Indices :meth:`ClientRows.class_counts` reads at a time from a csr table (bounds its temporaries)."""


class ClientRows(Sequence[np.ndarray]):
    """Row indices of every client, as ``ranges`` (starts, lengths) or ``csr`` (flat, offsets); see the module docstring."""

    def __init__(self, *, starts: np.ndarray | None = None, lengths: np.ndarray | None = None, flat: np.ndarray | None = None, offsets: np.ndarray | None = None) -> None:
        if (starts is None) == (flat is None):
            raise ValueError("give either starts and lengths (ranges) or flat and offsets (csr)")
        if starts is not None:
            if lengths is None or len(lengths) != len(starts):
                raise ValueError("ranges need one length per start")
            self._starts: np.ndarray | None = np.asarray(starts, dtype=np.int64)
            self._lengths = np.asarray(lengths, dtype=np.int64)
            if (self._lengths < 0).any() or (self._starts < 0).any():
                raise ValueError("starts and lengths must be >= 0")
            self._flat: np.ndarray | None = None
            self._offsets: np.ndarray | None = None
        else:
            if offsets is None or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(flat) or (np.diff(offsets) < 0).any():  # type: ignore[arg-type]
                raise ValueError("csr offsets must start at 0, not decrease and end at len(flat)")
            self._starts = None
            self._flat = flat
            self._offsets = np.asarray(offsets, dtype=np.int64)
            self._lengths = np.diff(self._offsets)

    # ---- constructors ------------------------------------------------------------
    @classmethod
    def from_lists(cls, rows: Sequence[np.ndarray]) -> ClientRows:
        """One array per client -> csr (one concatenated copy)."""
        lengths = np.array([len(r) for r in rows], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows]) if len(rows) else np.zeros(0, dtype=np.int64)
        return cls(flat=flat.astype(np.int64, copy=False), offsets=offsets)

    @classmethod
    def ranges(cls, starts: np.ndarray, lengths: np.ndarray | int) -> ClientRows:
        """Client ``c`` owns rows ``[starts[c], starts[c] + lengths[c])`` (``lengths``: one number for all)."""
        starts = np.asarray(starts, dtype=np.int64)
        return cls(starts=starts, lengths=np.broadcast_to(np.asarray(lengths, dtype=np.int64), starts.shape).copy())

    @classmethod
    def tiled(cls, num_clients: int, per_client: int, pool_size: int) -> ClientRows:
        """``num_clients`` clients of ``per_client`` contiguous rows each, laid over a pool of ``pool_size`` rows and wrapping around.

        Client ``c`` owns rows ``[(c * per_client) mod m, ... + per_client)`` with
        ``m = pool_size - pool_size mod per_client`` (every range lies inside the pool).
        """
        if num_clients < 0 or per_client < 1 or pool_size < per_client:
            raise ValueError(f"need num_clients >= 0 and 1 <= per_client <= pool_size, got {num_clients}, {per_client}, {pool_size}")
        span = pool_size - pool_size % per_client
        return cls.ranges((np.arange(num_clients, dtype=np.int64) * per_client) % span, per_client)

    @classmethod
    def empty(cls, num_clients: int) -> ClientRows:
        """``num_clients`` clients without rows (e.g. no client evaluation split)."""
        return cls.ranges(np.zeros(num_clients, dtype=np.int64), 0)

    # ---- Sequence ----------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._lengths)

    @overload
    def __getitem__(self, cid: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, cid: slice) -> Sequence[np.ndarray]: ...

    def __getitem__(self, cid: int | slice) -> np.ndarray | Sequence[np.ndarray]:
        if isinstance(cid, slice):
            return [self[i] for i in range(*cid.indices(len(self)))]
        n = len(self)
        if not -n <= cid < n:
            raise IndexError(f"client {cid} out of range [0, {n})")
        cid %= n
        if self._starts is not None:
            lo = int(self._starts[cid])
            return np.arange(lo, lo + int(self._lengths[cid]), dtype=np.int64)
        assert self._flat is not None and self._offsets is not None
        return np.asarray(self._flat[self._offsets[cid] : self._offsets[cid + 1]], dtype=np.int64)

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[i] for i in range(len(self)))

    # ---- whole-federation answers -------------------------------------------------
    def span(self, cid: int) -> slice | None:
        """Client ``cid``'s rows as a slice when they are one contiguous range (a view of the pool), else None."""
        if self._starts is None:
            return None
        lo = int(self._starts[cid])
        return slice(lo, lo + int(self._lengths[cid]))

    def lengths(self) -> np.ndarray:
        """Rows per client, [clients] int64."""
        return self._lengths.copy()

    def class_counts(self, labels: np.ndarray, num_classes: int) -> np.ndarray:
        """[clients, classes] int64 label counts, without a Python loop over clients.

        Ranges: differences of the pool's running class counts (memory O(pool x classes),
        whatever the number of clients); csr: one ``bincount`` per block of about a
        million indices.
        """
        n = len(self)
        labels = np.asarray(labels)
        if self._starts is not None:
            running = np.zeros((len(labels) + 1, num_classes), dtype=np.int64)
            np.cumsum(np.eye(num_classes, dtype=np.int64)[labels], axis=0, out=running[1:])
            return running[self._starts + self._lengths] - running[self._starts]
        assert self._flat is not None and self._offsets is not None
        out = np.zeros((n, num_classes), dtype=np.int64)
        lo = 0
        while lo < n:
            hi = max(lo + 1, int(np.searchsorted(self._offsets, self._offsets[lo] + CSR_BLOCK, side="right")) - 1)
            hi = min(hi, n)
            rows = np.asarray(self._flat[self._offsets[lo] : self._offsets[hi]], dtype=np.int64)
            owner = np.repeat(np.arange(hi - lo, dtype=np.int64), self._lengths[lo:hi])
            cells = owner * num_classes + labels[rows].astype(np.int64)
            out[lo:hi] = np.bincount(cells, minlength=(hi - lo) * num_classes).reshape(hi - lo, num_classes)
            lo = hi
        return out

    def nbytes(self) -> int:
        """Bytes the index arrays hold (a memory-mapped ``flat`` counts as its file size)."""
        arrays = [self._lengths, self._starts, self._flat, self._offsets]
        return sum(int(a.nbytes) for a in arrays if a is not None)

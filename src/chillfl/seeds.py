"""Every random stream of a run is derived here from (run seed, purpose, client id, round, ...).

Its own module, at the bottom of the import graph: data partitioning, model
initialisation, sampling, training and the methods all derive their seeds
from it without importing the training code.

A stream is keyed by its whole tuple: names are hashed in full, and ``(s, "x")``
differs from ``(s, "x", 0)``. Until 2026-12 a name was keyed by its first 4
bytes only and the tuple was zero-padded to 4 words, so ``"perfedavg"`` and
``"perfedavg-adapt"`` were one stream. The names in ``PREFIX_KEYED`` keep that
old key so that the documented outputs (docs/*.md) reproduce bit for bit; the
table is frozen, and a call with any other name gets the full key.
"""

from __future__ import annotations

import hashlib
import numbers

import numpy as np

PREFIX_KEYED: frozenset[str] = frozenset({
    "apple", "augment", "availability", "client", "clients", "count", "cpn", "distill", "dropout", "fedala", "fedcp",
    "fedfomo", "fedtgp-generator", "fesem", "fml-local", "hkd-noise", "ifca", "init", "items", "perfedavg", "personal",
    "pfedme", "poisson", "public-subset", "rows", "sample", "server", "sweep", "train",
})
"""Names keyed by their first 4 bytes, as every name was before 2026-12 (no two of their call sites share a stream:
tests/test_seeds.py). Never add a name: a new stream gets the full key."""


def instance_seed(seed: int | None) -> int:
    """The seed an aggregator built in Python draws with: ``seed``, which a run fills with its own when the caller left it
    None (its spec's ``bind``), or 0 for an instance used outside a run, as the constructors' former default was. An
    integer of another type (``np.int64(3)``, read from an array) draws as its int; a float or a bool is a TypeError."""
    if seed is None:
        return 0
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"a seed is an int, got {type(seed).__name__} {seed!r}")
    return int(seed)


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from (run seed, purpose, client id, round, ...): independent streams, no global RNG."""
    for p in parts:
        if type(p) is not int and type(p) is not str:
            raise TypeError(f"derive_seed takes ints and strs, got {type(p).__name__}")
        if type(p) is int and p < 0:
            raise ValueError(f"derive_seed takes ints >= 0, got {p}")
    return _prefix_keyed(parts) if all(type(p) is int or p in PREFIX_KEYED for p in parts) else _full_keyed(parts)


def _full_keyed(parts: tuple[int | str, ...]) -> int:
    """A hash of the tuple in a tagged encoding (``i<int>,`` and ``s<length>:<bytes>``): no two tuples share it."""
    key = b"".join(b"i%d," % p if isinstance(p, int) else b"s%d:%s" % (len(p.encode()), p.encode()) for p in parts)
    return int.from_bytes(hashlib.blake2b(key, digest_size=8, person=b"chillfl-seed").digest(), "little") & (2**63 - 1)


def _prefix_keyed(parts: tuple[int | str, ...]) -> int:
    """The key every stream had before 2026-12: a name's first 4 bytes, the tuple zero-padded to 4 words."""
    ints = [p if isinstance(p, int) else int.from_bytes(p.encode(), "little") % (2**32) for p in parts]
    return int(np.random.SeedSequence(ints).generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1, 2**32], dtype=np.uint64)) & (2**63 - 1)

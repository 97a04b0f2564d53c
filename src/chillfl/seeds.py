"""Every random stream of a run is derived here from (run seed, purpose, client id, round, ...).

Its own module, at the bottom of the import graph: data partitioning, model
initialisation, sampling, training and the methods all derive their seeds
from it without importing the training code.
"""

from __future__ import annotations

import numpy as np


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from (run seed, purpose, client id, round, ...): independent streams, no global RNG."""
    ints = [p if isinstance(p, int) else int.from_bytes(p.encode(), "little") % (2**32) for p in parts]
    return int(np.random.SeedSequence(ints).generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1, 2**32], dtype=np.uint64)) & (2**63 - 1)

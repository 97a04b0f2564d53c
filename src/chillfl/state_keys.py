"""Refuse a saved state of another layout before any of it is loaded.

Why its own module: every stateful part (an aggregator, the soft-label caches, the engine's communication ledger)
checks a ``load_state_dict`` argument the same way, with the same message, and the engine sits below
``aggregation/``, so the check cannot live there. It is a leaf: it imports nothing from chillfl, so any layer may
use it and imports keep flowing one way. ``chillfl.aggregation.base`` and ``chillfl.extend`` re-export it.
"""

from __future__ import annotations

from typing import Any, Collection, Mapping

__all__ = ["check_state_keys"]


def check_state_keys(state: Mapping[str, Any], keys: Collection[str], owner: str) -> None:
    """Refuse a state of another layout (e.g. a SCAFFOLD checkpoint loaded into FedAvg) instead of half-loading it."""
    if set(state) != set(keys):
        raise ValueError(f"{owner} state must have keys {sorted(keys)}, got {sorted(state)}")

"""How an analysis's figure grows with its runs: a grid of bounded width, not one row as wide as the runs are many.

Why: one panel (or one x position) per run in a single row made 27 runs a 10,700-px-wide strip that a page or an
image viewer shows a few pixels high; ``data show``'s heat map caps its width for the same reason
(:data:`chillfl.data.show.HEATMAP_MAX_WIDTH`).
"""

from __future__ import annotations

import math
from typing import Sequence, TypeVar

T = TypeVar("T")

MAX_COLUMNS = 5
"""Panels a row of a per-run panel figure (the reliability diagrams) holds at most."""
RUNS_PER_ROW = 10
"""Runs one axis of a runs-on-x figure (Fig. 9, Fig. 10) holds at most; more go on further rows."""


def grid_shape(n: int, columns: int = MAX_COLUMNS) -> tuple[int, int]:
    """(rows, columns) of ``n`` panels at most ``columns`` wide."""
    cols = max(1, min(columns, n))
    return max(1, math.ceil(n / cols)), cols


def rows_of(items: Sequence[T], size: int = RUNS_PER_ROW) -> list[list[T]]:
    """``items`` in rows of at most ``size`` (one empty row for none: the figure still has its axes)."""
    return [list(items[i : i + size]) for i in range(0, len(items), size)] or [[]]

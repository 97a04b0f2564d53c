"""What a tensor of inputs holds, in one pass over it: whether every value is a whole number, and its range.

Why here: a model that reads integer indices (:mod:`chillfl.models.inputs`) asks it of every row of a dataset
before a run. An :class:`~chillfl.data.datasets.ArrayDataset` keeps the answer for its splits
(:attr:`~chillfl.data.datasets.ArrayDataset.split_values`), so the runs that share one loaded dataset (a
comparison's variants, its check and its run) scan it once, not once a run.

Checked against (2026-12): torch.trunc integrality and torch.aminmax on float and integer tensors (what index-reading models require).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 1 << 22
"""Elements compared at once: the integrality test of a large dataset allocates no more than this."""


@dataclass(frozen=True)
class InputValues:
    """One tensor's values: the first that is not a whole number (None: all are), and the smallest and largest."""

    fraction: float | None
    low: float
    high: float


def first_fraction(x: torch.Tensor) -> float | None:
    """The first value of ``x`` that is not a whole number; None when all are (always for integer dtypes)."""
    if not x.is_floating_point():
        return None
    flat = x.reshape(-1)
    for start in range(0, flat.numel(), BLOCK):
        block = flat[start : start + BLOCK]
        bad = (block != block.trunc()).nonzero()
        if len(bad):
            return float(block[int(bad[0, 0])])
    return None


def input_values(x: torch.Tensor) -> InputValues:
    """``x``'s :class:`InputValues`: an integrality pass in blocks (no copy) and one min/max pass over every row."""
    if x.numel() == 0:
        return InputValues(None, 0.0, 0.0)
    low, high = (float(v) for v in torch.aminmax(x))
    return InputValues(first_fraction(x), low, high)

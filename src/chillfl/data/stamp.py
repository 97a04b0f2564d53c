"""Patterns stamped on training batches after their crop and flip: where a data-poisoning trigger stays put.

A data-poisoning attack (``backdoor``, ``dba``, a plugin's) marks some of an attacker's training rows with a
pixel pattern (:meth:`chillfl.data.FederatedData.with_stamps`). Every read of the client's inputs sees the
marked rows stamped (:meth:`~chillfl.data.FederatedData.client_train`: its predictions, a method's full-batch
gradient, its prototypes). A training step that crops and flips its batch (``[dataset.augment]``) forms the
batch from the rows *without* the pattern, crops and flips it, then stamps the pattern on the marked rows
(:func:`stamp_codes`, called by :func:`chillfl.training.local.step_batch`): the trigger sits at the same pixels
in every batch, as on the attack's probe, as BadNets, FLPoison and the DBA authors' ``add_pixel_pattern`` stamp
it. Without augmentation both are the same bits (a pattern overwrites fixed pixels with fixed values), and the
step reads the stamped rows as it always did.

Which rows are marked is drawn once (the attack's hook, from the run's seed), not per batch; stamping is a
pure function of the batch, so every executor and a resumed run stamp the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import numpy as np
import torch


class Pattern(Protocol):
    """What a stamp writes: ``apply(x)`` is ``x`` (any leading dims, then C x H x W or H x W) with the pattern on
    every row, a new tensor, the same pixels with the same values whatever the row (so stamping commutes with
    nothing but itself). Frozen dataclasses (hashable, picklable) serve: executors compare and send them."""

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        ...


@dataclass(frozen=True)
class Marks:
    """One client's marked rows: positions in its training rows (:meth:`~chillfl.data.FederatedData.client_train`'s
    order) and the pattern stamped on them."""

    rows: np.ndarray
    pattern: Pattern


@dataclass(frozen=True)
class RowStamp:
    """A client's training inputs as an augmented step reads them: ``clean`` (its rows without the pattern, aligned
    with the stamped inputs), ``marked`` (bool per row) and the ``pattern`` stamped on those after the crop and flip."""

    clean: torch.Tensor
    marked: torch.Tensor
    pattern: Pattern

    def __getitem__(self, rows: Any) -> RowStamp:
        """The stamp of a subset of the rows (a personalising method's training on some of them)."""
        return RowStamp(self.clean[rows], self.marked[rows], self.pattern)

    def to(self, device: torch.device | str) -> RowStamp:
        return RowStamp(self.clean.to(device), self.marked.to(device), self.pattern)


def stamped_rows(x: torch.Tensor, marks: Marks) -> torch.Tensor:
    """``x`` (a client's rows) with ``marks.pattern`` on its marked rows, as a new tensor (``x`` untouched)."""
    out = x.clone()
    if len(marks.rows):
        rows = torch.from_numpy(np.asarray(marks.rows, dtype=np.int64)).to(x.device)
        out[rows] = marks.pattern.apply(out[rows])
    return out


def stamp_codes(x: torch.Tensor, codes: torch.Tensor, patterns: Sequence[Pattern]) -> torch.Tensor:
    """``x`` [clients, batch, ...] with ``patterns[k - 1]`` on the rows whose code is k (0: no stamp).

    One ``torch.where`` per pattern over the whole batch: no host sync (nothing reads which rows are marked),
    and the values are the pattern's own bits whichever executor forms the batch.
    """
    extra = [1] * (x.dim() - codes.dim())
    for k, pattern in enumerate(patterns, start=1):
        x = torch.where((codes == k).view(*codes.shape, *extra), pattern.apply(x), x)
    return x


def chunk_codes(stamps: Sequence[RowStamp | None]) -> tuple[list[Pattern], list[int]]:
    """The distinct patterns of some clients' stamps and each client's code (0: none; k: ``patterns[k - 1]``)."""
    patterns = list(dict.fromkeys(s.pattern for s in stamps if s is not None))
    return patterns, [0 if s is None else 1 + patterns.index(s.pattern) for s in stamps]

"""A user's map-style ``torch.utils.data.Dataset`` read item by item, its random transforms under seeded RNGs.

chillfl trains on tensors, so a Dataset passed from Python (``chillfl.DatasetData``)
is read into one preallocated tensor per split. Its transforms run inside
``__getitem__`` and draw from the global RNGs of torch, Python's ``random`` and
NumPy (torchvision uses the first two, albumentations the last two). Before each
item is read, all three are seeded with that item's own seed, and the states they
had are restored once the read is done: a read is a pure function of its seeds
(bitwise the same in every run, under every executor, whatever else drew random
numbers before), and the user's own streams are left as they were.

Seeds (:func:`item_seeds`: a stream of 63-bit seeds from one base seed, one per item):

* the first read of every split (train, test, public) seeds item ``i`` of the split
  from (``"items"``, split, ``i``) alone: test and public sets are fixed, and the
  same for every run seed;
* ``DatasetData(redraw="round")`` (the default) reads a client's training items
  anew each round it is sampled: the ``k``-th of its rows from (run seed,
  ``"transform"``, round, client, ``k``), see
  :meth:`chillfl.data.federated.FederatedData.client_redraw`. A random
  augmentation is drawn afresh at every visit, as a DataLoader draws it afresh
  every epoch; within a round, the client's local epochs see the same draw.
  ``redraw="once"`` keeps the first read for the whole run (cheaper, for
  transforms that are not random).

Labels are read once, with the first read.

Checked against (2026-12): DataLoader semantics (a transform draws at each item read), here seeded per item and round, not per local epoch.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from chillfl.errors import ConfigError, one_line
from chillfl.global_rng import GLOBAL_RNG
from chillfl.options import short_repr
from chillfl.seeds import derive_seed

REDRAWS = ("round", "once")
"""``DatasetData.redraw``: read a client's training items anew every round it is sampled, or once for the run."""


def item_seeds(base: int, n: int) -> np.ndarray:
    """``n`` seeds in [0, 2^63) drawn from ``base``: one per item, in order."""
    return np.random.default_rng(base).integers(0, 2**63 - 1, size=n, dtype=np.int64)


def first_read_seed(split: str) -> int:
    """Base seed of a split's first read (see the module docstring): the same for every run."""
    return derive_seed("items", split)


@contextmanager
def preserved_rngs() -> Iterator[None]:
    """Run the body, then put torch's CPU RNG, ``random`` and NumPy's global RNG back as they were."""
    state = torch.get_rng_state(), random.getstate(), np.random.get_state()
    try:
        yield
    finally:
        torch.set_rng_state(state[0])
        random.setstate(state[1])
        np.random.set_state(state[2])


def _seed_all(seed: int) -> None:
    torch.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed & 0xFFFF_FFFF)  # NumPy's legacy seed takes 32 bits


HOLD_S = 0.005
"""Seconds :func:`read_items` holds :data:`~chillfl.global_rng.GLOBAL_RNG` for at most (past the item it is reading)
before it lets other threads' blocks in: a save and restore of the three RNGs costs about 0.1 ms (NumPy's state), more
than a cheap item, so it is paid once per hold, not per item, and another thread waits about this long at most."""


def read_items(dataset: Any, field: str, rows: Sequence[int] | np.ndarray, seeds: np.ndarray, shape: tuple[int, ...] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Items ``rows`` of ``dataset`` as (inputs, labels), item ``rows[k]`` read under ``seeds[k]``.

    Inputs go into one preallocated tensor (the dataset is never held twice);
    ``shape``: the shape every input must have (None: item 0's). Errors name ``field``.

    The seeding, the reads and the restore of the RNGs are blocks under :data:`~chillfl.global_rng.GLOBAL_RNG` (a few
    items each, :data:`HOLD_S`): a run in another thread neither reseeds them amid a transform's draws (its items would
    differ from a run alone) nor has this seed land amid its own block (its dropout would), and the restores never
    cross, so the caller's states are as they were. The lock is re-entrant: a transform that itself enters a block of
    chillfl's runs as before; one that waits for another thread that enters such a block would wait for ever.
    """
    n = len(rows)
    x: torch.Tensor | None = None
    y = torch.empty(n, dtype=torch.int64)
    k = 0
    while k < n:
        with GLOBAL_RNG, preserved_rngs():
            held = time.perf_counter()
            while k < n:
                i = int(rows[k])
                _seed_all(int(seeds[k]))
                try:
                    item = dataset[i]
                except Exception as exc:  # noqa: BLE001 - the user's __getitem__ / transform: a bad item, named, before anything is written
                    raise ConfigError(field, f"reading item {i} failed: {type(exc).__name__}: {one_line(str(exc))}") from None
                xi, yi = _input_label(item, field, i)
                if x is None:
                    x = torch.empty((n, *(tuple(xi.shape) if shape is None else shape)), dtype=xi.dtype)
                if tuple(xi.shape) != tuple(x.shape[1:]):
                    raise ConfigError(field, f"item {i}'s input has shape {tuple(xi.shape)}, item {int(rows[0])}'s {tuple(x.shape[1:])}")
                x[k] = xi
                y[k] = label(yi, field, i)
                k += 1
                if time.perf_counter() - held > HOLD_S:
                    break
    if x is None:
        x = torch.empty((0, *(shape or ())))
    return x, y


def _input_label(item: Any, field: str, index: int) -> tuple[torch.Tensor, Any]:
    """An item's (input as a tensor, label as read)."""
    if not isinstance(item, (tuple, list)) or len(item) < 2:
        raise ConfigError(field, f"item {index} must be (input, label), got {type(item).__name__}")
    xi, yi = item[0], item[1]
    if not isinstance(xi, torch.Tensor):
        if not isinstance(xi, np.ndarray):
            raise ConfigError(field, f"item {index}'s input is a {type(xi).__name__}; make the transform return a tensor (e.g. torchvision's ToTensor())")
        xi = torch.from_numpy(np.ascontiguousarray(xi))
    return xi, yi


def materialize(dataset: Any, field: str, split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A map-style Dataset's first read: every item, seeded from (split, index) (see the module docstring)."""
    try:
        n = len(dataset)
    except TypeError:
        raise ConfigError(field, f"must be a map-style Dataset with __len__ (an IterableDataset has no fixed size), got {type(dataset).__name__}") from None
    if isinstance(dataset, DataLoader) or not callable(getattr(dataset, "__getitem__", None)):  # a DataLoader has a len (its batches) but no items
        hint = ": pass its .dataset" if isinstance(dataset, DataLoader) else ""
        raise ConfigError(field, f"must be a map-style Dataset (ds[i] -> (input, label)), got {type(dataset).__name__}{hint}")
    if n == 0:
        raise ConfigError(field, "is empty")
    return read_items(dataset, field, range(n), item_seeds(first_read_seed(split), n))


def label(value: Any, field: str, index: int) -> int:
    """An item's label: a Python/NumPy integer or a one-element integer tensor or array."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    elif isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iu":
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(field, f"item {index}'s label must be an integer class, got {short_repr(value)}")
    return int(value)


@dataclass(frozen=True, eq=False)
class ItemReader:
    """The training Dataset of a ``DatasetData(redraw="round")``: clients' items are read anew at every visit."""

    dataset: Any
    field: str = "data.train"

    def read(self, rows: np.ndarray, seed: int, like: torch.Tensor) -> torch.Tensor:
        """Inputs of items ``rows``, the ``k``-th under the ``k``-th of :func:`item_seeds` ``(seed)``; ``like``'s item shape and dtype."""
        x, _ = read_items(self.dataset, self.field, rows, item_seeds(seed, len(rows)), tuple(like.shape[1:]))
        return x.to(like.dtype)

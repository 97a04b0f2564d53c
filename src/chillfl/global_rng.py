"""torch's global generators, shared by the runs in the threads of one process.

Dropout and PyTorch's default weight initialisation draw from torch's one CPU generator (and a device's own): a run
forks it (:func:`torch.random.fork_rng`), seeds it from its own stream and draws, and the fork gives the caller's
state back. Two runs in two threads did so at once: one's seed landed amid the other's draws (different results from
the runs alone) and the forks restored out of order (the caller's generator left in some client's seeded state). Every
fork, seed and draw of chillfl's is one block under :data:`GLOBAL_RNG`, so blocks of different threads never overlap:
each restores what it found, and its draws are its own seed's. A block is only entered where something draws (a
client's training only for a model that may draw: :func:`chillfl.training.local.draws_global`; an evaluation only
for one with a torch layer that draws in eval mode, fractional max-pooling; a Dataset's items a few at a time,
:func:`chillfl.data.items.read_items`), so runs that draw nothing are not serialised. Draws your own code makes in another thread while a run is going on are not held by it:
they may land inside a run's block (its results change) and are undone when it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

GLOBAL_RNG = threading.RLock()
"""Held for a whole fork-seed-draw block of torch's global generators (re-entrant: blocks nest in one thread)."""


@contextmanager
def forked_rng(seed: int | None = None, devices: Sequence[int] = (), device_type: str = "cuda") -> Iterator[None]:
    """:func:`torch.random.fork_rng` of the CPU generator (and ``devices``' of ``device_type``), seeded with ``seed``
    (the CPU's alone: ``torch.manual_seed`` also reseeds every CUDA generator, which the fork does not restore), under
    :data:`GLOBAL_RNG` until it is restored."""
    with GLOBAL_RNG, torch.random.fork_rng(devices=list(devices), device_type=device_type):
        if seed is not None:
            torch.random.default_generator.manual_seed(seed)
        yield

"""A Dataset's items are read with the RNGs seeded under GLOBAL_RNG: another thread's block of chillfl's cannot start
while a transform draws from the item's seed (it would reseed amid the draws, or this seed would land amid its block).

How the old code fails reliably: the transform of item 0 stops (an Event, no sleep) while another thread probes the
lock without blocking; the old read held nothing, so the probe got the lock every time, drew inside the item's read,
and changed it. No timing decides the outcome: the probe runs only once the transform is parked, and never waits."""

from __future__ import annotations

import random
import threading

import numpy as np
import torch

from chillfl.data.items import item_seeds, read_items
from chillfl.global_rng import GLOBAL_RNG, forked_rng


class Parked(torch.utils.data.Dataset):
    """Draws, parks in item 0 until told to go on, draws again."""

    def __init__(self, parked: threading.Event | None = None, go: threading.Event | None = None) -> None:
        self.parked, self.go = parked, go

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        a = torch.rand(3)
        if i == 0 and self.parked is not None and self.go is not None:
            self.parked.set()
            assert self.go.wait(30), "the probe never let the read go on"
        return a + torch.rand(3) + random.random() + float(np.random.rand()), 0


def test_a_transform_draws_under_the_lock_and_no_other_block_lands_in_it() -> None:
    alone = read_items(Parked(), "data.train", range(4), item_seeds(7, 4))[0]
    parked, go = threading.Event(), threading.Event()
    out: dict[str, torch.Tensor] = {}
    reader = threading.Thread(target=lambda: out.__setitem__("x", read_items(Parked(parked, go), "data.train", range(4), item_seeds(7, 4))[0]))
    torch.manual_seed(123)
    caller = torch.get_rng_state()
    reader.start()
    try:
        assert parked.wait(30)
        got = GLOBAL_RNG.acquire(blocking=False)  # a block of another thread's, entered mid-item
        if got:
            try:
                torch.random.default_generator.manual_seed(5)  # as client_rng seeds, and draws
                torch.rand(2)
            finally:
                GLOBAL_RNG.release()
    finally:
        go.set()
        reader.join(30)
    assert not got, "another thread entered a block while a transform drew from its item's seed"
    assert torch.equal(out["x"], alone)
    assert torch.equal(torch.get_rng_state(), caller)


class Nested(torch.utils.data.Dataset):
    """A transform that itself enters a block of chillfl's (in the reading thread: the lock is re-entrant)."""

    def __len__(self) -> int:
        return 3

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        with forked_rng(11):
            inner = torch.rand(2)
        return inner + torch.rand(2), 0


def test_a_transform_entering_a_block_of_its_own_does_not_deadlock() -> None:
    done: dict[str, torch.Tensor] = {}
    reader = threading.Thread(target=lambda: done.__setitem__("x", read_items(Nested(), "data.train", range(3), item_seeds(1, 3))[0]), daemon=True)
    reader.start()
    reader.join(30)
    assert "x" in done
    assert torch.equal(done["x"], read_items(Nested(), "data.train", range(3), item_seeds(1, 3))[0])

"""Blocks that seed or fork a process-global generator hold :data:`chillfl.global_rng.GLOBAL_RNG`, as every other
block of chillfl's does: DP-SGD's per-sample probe (it forks torch's generator) and MNIST-1D's generation (it seeds
numpy's and Python's). Unheld, a run in another thread that drew amid them got other draws (seedstreams 1, 2: 191
seeded blocks changed; MNIST-1D's changed arrays then stayed in its cache). Checked from the inside: while the block
runs, another thread cannot take the lock."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch import nn

from chillfl.global_rng import GLOBAL_RNG


def held_elsewhere() -> bool:
    """Whether another thread holds GLOBAL_RNG now (this thread's try from a second thread fails)."""
    got: list[bool] = []

    def probe() -> None:
        ok = GLOBAL_RNG.acquire(blocking=False)
        if ok:
            GLOBAL_RNG.release()
        got.append(ok)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return not got[0]


def test_dp_sgds_probe_forks_under_the_lock() -> None:
    from chillfl.privacy.dpsgd import check_per_sample

    seen: list[bool] = []

    class Watch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(held_elsewhere())
            return self.fc(x)

    check_per_sample(Watch(), torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    assert seen and all(seen)
    assert not held_elsewhere()  # and given back


def test_mnist1d_generation_seeds_under_the_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.data.datasets as datasets

    seen: list[bool] = []

    class Args:
        num_samples, seed, train_split = 0, 0, 0.0

    class Fake:
        @staticmethod
        def get_dataset_args() -> Args:
            return Args()

        @staticmethod
        def make_dataset(args: Args) -> dict[str, np.ndarray]:
            seen.append(held_elsewhere())
            return {k: np.zeros(2) for k in ("x", "y", "x_test", "y_test")}

    monkeypatch.setattr(datasets, "need", lambda *a: Fake)
    datasets._mnist1d_arrays.cache_clear()
    try:
        datasets._mnist1d_arrays(20, 123456, 0.5)
    finally:
        datasets._mnist1d_arrays.cache_clear()
    assert seen == [True]


def test_a_seed_past_the_largest_is_refused_naming_the_bound() -> None:
    from chillfl.config import check_compare_option
    from chillfl.errors import ConfigError

    check_compare_option("seeds", [0, 2**63 - 1])
    with pytest.raises(ConfigError, match=r"compare.seeds: .*integer seeds from 0 to 2\*\*63 - 1, got \[9223372036854775808\]"):
        check_compare_option("seeds", [2**63])

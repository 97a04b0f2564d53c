"""Start-up's checks over every training row without numpy 2.4's hash-based ``np.unique`` (report-scale #3).

``has_repeats``, ``natural``'s overlap check and ``np.setdiff1d(np.arange(n), public)`` each ran ``np.unique`` over every
training row: in numpy 2.4 its hash path took 15-20x a sort on the all-distinct row indices (0.2 s at 260,000 rows, an
empty public pool included). A sort and a neighbour compare, ``np.arange(n)`` without a public pool and
``assume_unique`` (``public`` is sorted and distinct) give the same answers and the same arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from chillfl.data.datasets import ArrayDataset
from chillfl.data.federated import build_federated_data
from chillfl.data.partition import has_repeats, partition
from chillfl.errors import ConfigError


def _no_unique(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("np.unique over the training rows")

    monkeypatch.setattr(np, "unique", refused)


def test_has_repeats_answers_as_unique_did_without_calling_it(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    cases = [np.zeros(0, dtype=np.int64), np.array([3]), np.array([2, 2]), rng.permutation(1000), np.concatenate([rng.permutation(1000), [999]]),
             rng.integers(0, 50, size=40), np.array([5, 1, 4, 1])]
    expected = [len(np.unique(c)) != len(c) for c in cases]
    _no_unique(monkeypatch)
    assert [has_repeats(c) for c in cases] == expected == [False, False, True, False, True, True, True]


def _dataset(groups: list[list[int]], n: int = 12) -> ArrayDataset:
    y = torch.arange(n) % 3
    return ArrayDataset("groups", torch.zeros(n, 2), y, torch.zeros(6, 2), torch.arange(6) % 3, 3,
                        train_groups=tuple(np.asarray(g, dtype=np.int64) for g in groups))


def test_natural_checks_overlap_without_unique(monkeypatch: pytest.MonkeyPatch) -> None:
    labels = np.arange(12) % 3
    good = _dataset([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]])
    before = partition("natural", labels, 3, np.random.default_rng(0), {}, dataset=good).client_indices
    _no_unique(monkeypatch)
    after = partition("natural", labels, 3, np.random.default_rng(0), {}, dataset=good).client_indices
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    with pytest.raises(ConfigError, match="overlapping or out-of-range train_groups"):
        partition("natural", labels, 3, np.random.default_rng(0), {}, dataset=_dataset([[0, 1, 2, 3], [3, 4, 5, 6], [8, 9, 10, 11]]))


@pytest.mark.parametrize("public_size", [0, 5])
def test_the_rows_outside_the_public_pool_are_the_same_without_a_full_set_difference(monkeypatch: pytest.MonkeyPatch, public_size: int) -> None:
    n = 40
    dataset = ArrayDataset("rows", torch.zeros(n, 2), torch.arange(n) % 4, torch.zeros(8, 2), torch.arange(8) % 4, 4)
    kwargs: dict[str, Any] = dict(num_clients=4, partitioner="iid", partition_options=None, seed=3, public_size=public_size)
    before = build_federated_data(dataset, **kwargs)
    full = []
    setdiff = np.setdiff1d

    def spy(a: Any, b: Any, assume_unique: bool = False) -> Any:
        if len(a) == n and not assume_unique:
            full.append(len(b))
        return setdiff(a, b, assume_unique=assume_unique)

    monkeypatch.setattr(np, "setdiff1d", spy)
    after = build_federated_data(dataset, **kwargs)
    assert full == []  # old: one np.setdiff1d(np.arange(n), public), an empty public included
    assert np.array_equal(before.public_indices, after.public_indices) and len(after.public_indices) == public_size
    assert all(np.array_equal(a, b) for a, b in zip(before.train_indices, after.train_indices))
    assert all(np.array_equal(a, b) for a, b in zip(before.eval_indices, after.eval_indices))
    rest = setdiff(np.arange(n), before.public_indices)
    assert np.array_equal(np.sort(np.concatenate(list(after.train_indices))), rest)  # iid gives every row outside the pool

"""flexchill_dirichlet where the authors' code breaks: a tiny alpha (NaN Dirichlet rows) and a test class too small
for the per-client test minimum (the slice moved back and handed test rows to two clients)."""

from __future__ import annotations

import numpy as np
import torch

from chillfl.data import ArrayDataset, partition
from chillfl.data.partition import flexchill_split


def _dataset(y_train: np.ndarray, y_test: np.ndarray, classes: int) -> ArrayDataset:
    return ArrayDataset("toy", torch.zeros(len(y_train), 2), torch.from_numpy(y_train), torch.zeros(len(y_test), 2), torch.from_numpy(y_test), classes)


def _counts(parts: list[np.ndarray], labels: np.ndarray, classes: int) -> list[list[int]]:
    return [np.bincount(labels[ix], minlength=classes).tolist() for ix in parts]


def _disjoint(parts: list[np.ndarray]) -> bool:
    flat = np.concatenate(parts)
    return len(np.unique(flat)) == len(flat)


def test_a_tiny_alpha_gives_one_hot_rows_instead_of_a_nan_crash() -> None:
    # RandomState(0).dirichlet([1e-3] * 2, 3) is [[~0, 1], [nan, nan], [1, ~0]]: the authors' int(nan * rest) raises.
    assert np.isnan(np.random.RandomState(0).dirichlet([1e-3] * 2, 3)[1]).all()
    y = np.repeat(np.arange(3), 30)
    yt = np.repeat(np.arange(3), 12)
    part = partition("flexchill_dirichlet", y, 2, np.random.default_rng(0), {"alpha": 1e-3, "min_samples": 2, "seed": 0}, dataset=_dataset(y, yt, 3))
    assert part.client_test_indices is not None
    assert _disjoint(part.client_indices) and _disjoint(part.client_test_indices)
    # each class: the minimum (2) to one client, the rest (28) to the other, the NaN class too (alpha -> 0 is one-hot)
    counts = np.array(_counts(part.client_indices, y, 3))
    assert counts[:, 0].tolist() == [2, 28] and counts[:, 2].tolist() == [28, 2]
    assert sorted(counts[:, 1].tolist()) == [2, 28]


def test_a_small_test_class_gives_no_test_row_to_two_clients() -> None:
    # 70 train rows, 120 test rows; class 2 has 4 test rows, under min_samples * k * N_test // N_train = 4*4*120//70 = 27:
    # the authors' rest_te is negative, a client's share turns negative and the slice moved back (rows 118, 119 twice).
    y = np.repeat(np.arange(3), [24, 21, 25])
    yt = np.repeat(np.arange(3), [58, 58, 4])
    train, test = flexchill_split(y, yt, 4, 3, 0.5, 4, 4)
    assert _disjoint(train) and _disjoint(test)
    assert all(t.min() >= 0 and t.max() < len(yt) for t in test if len(t))
    # classes 0 and 1 have rows enough: their shares are the authors' (minimum 6 = 4 * 120 // 70 each client)
    assert all(row[0] >= 6 and row[1] >= 6 for row in _counts(test, yt, 3))

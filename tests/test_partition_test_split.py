"""A partitioner's own per-client test split (``Partition.client_test_indices``, read by ``eval.client_split =
"partition"``) is checked as its training split is: one line on ``partition.name``, not an IndexError mid-run."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
import torch

import chillfl.data.partition  # noqa: F401 - the module, for sys.modules: chillfl.data's `partition` is its function
from chillfl.data import ArrayDataset
from chillfl.errors import ConfigError

module = sys.modules["chillfl.data.partition"]


def _with_test_split(test: Any) -> Any:
    from chillfl.data.partition import Partition

    def split(labels: np.ndarray, k: int, rng: np.random.Generator, opts: Any, section: str, dataset: Any) -> Partition:
        return Partition([np.arange(i, len(labels), k) for i in range(k)], client_test_indices=test)

    return split


@pytest.mark.parametrize(("test", "words"), [
    ([np.arange(5), np.arange(5), np.array([3, 50])], "gave client 2 test row indices outside [0, 39] (the test set has 40 rows)"),
    ([np.arange(5)] * 2, "one test index array per client (3, federation.num_clients) in Partition.client_test_indices, got 2"),
    ([np.arange(5), np.arange(5), np.array([0.5])], "gave client 2 array([0.5]) in Partition.client_test_indices, not a 1-D array"),
    ([np.arange(5), np.array([-1, 2]), np.arange(5)], "gave client 1 test row indices outside [0, 39]"),
])
def test_a_partitioners_own_test_split_is_checked_as_its_training_split(monkeypatch: pytest.MonkeyPatch, test: Any, words: str) -> None:
    """A partitioner's ``client_test_indices`` (``eval.client_split = "partition"``) were sorted and taken as they came:
    a row past the test set ran on as an IndexError in the middle of an evaluation, a client short of a split as an
    IndexError there too. Now one line on ``partition.name``, as for the training split."""
    monkeypatch.setitem(module.PARTITIONERS, "t_test_split", module.PartitionerEntry(module.NoOptions, _with_test_split(test)))
    labels = torch.arange(60) % 4
    dataset = ArrayDataset("t", torch.zeros(60, 2), labels, torch.zeros(40, 2), torch.arange(40) % 4, 4)
    with pytest.raises(ConfigError) as err:
        module.partition("t_test_split", labels.numpy(), 3, np.random.default_rng(0), dataset=dataset)
    assert err.value.field == "partition.name" and words in err.value.message
    fine = [np.array([7, 1]), np.arange(3), np.array([39])]
    monkeypatch.setitem(module.PARTITIONERS, "t_test_split", module.PartitionerEntry(module.NoOptions, _with_test_split(fine)))
    part = module.partition("t_test_split", labels.numpy(), 3, np.random.default_rng(0), dataset=dataset)
    assert [ix.tolist() for ix in part.client_test_indices or []] == [[1, 7], [0, 1, 2], [39]]

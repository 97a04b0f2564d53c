"""QA of the data area: partition files, partitioner edge cases and statistics, by hand on small cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from chillfl.data.partition_file import read_partition
from chillfl.errors import ConfigError


def _read(tmp_path: Path, clients: object, train_size: int = 10) -> list[np.ndarray]:
    path = tmp_path / "partition.json"
    path.write_text(json.dumps({"format": "chillfl-partition", "version": 1, "train_size": train_size, "clients": clients}))
    return read_partition({"from": str(path)}, train_size, 2, np.zeros(0, dtype=np.int64)).clients


def test_partition_file_indices_are_checked_before_numpy_sees_them(tmp_path: Path) -> None:
    assert [ix.tolist() for ix in _read(tmp_path, [[3, 1], [0]])] == [[1, 3], [0]]
    for clients, words in (
        ([[0, 2**70], [1]], r"must be in \[0, 9\]"),  # an index past int64: was numpy's OverflowError traceback
        ([[0, -(2**70)], [1]], r"must be in \[0, 9\]"),
        ([[], []], "no client any training sample"),  # every client empty: was a NaN global model (exit 3)
    ):
        with pytest.raises(ConfigError, match=words) as info:
            _read(tmp_path, clients)
        assert info.value.field == "partition.from"


def test_an_array_datasets_natural_groups_are_checked_like_client_test() -> None:
    """An ArrayDataset passed to chillfl.run: a test group past the test set was an IndexError mid-run, a negative
    index silently another row, float indices silently truncated."""
    import chillfl
    import torch

    from chillfl.api import as_dataset
    from chillfl.data.datasets import ArrayDataset

    x, y = torch.zeros(8, 3), torch.arange(8) % 2
    train = (np.arange(0, 4), np.arange(4, 8))

    def groups(train_groups: tuple, test_groups: tuple) -> ArrayDataset:
        return as_dataset(ArrayDataset("u", x, y, x[:6], y[:6], 2, train_groups, test_groups))

    assert [g.tolist() for g in groups(train, (np.arange(3), np.arange(3, 6))).test_groups or ()] == [[0, 1, 2], [3, 4, 5]]
    for train_groups, test_groups, field in (
        (train, (np.arange(3), np.arange(3, 7)), "data.test_groups"),
        (train, (np.arange(3), np.array([-1, 4])), "data.test_groups"),
        ((np.arange(0, 4.0), np.arange(4, 8)), (np.arange(3), np.arange(3, 6)), "data.train_groups"),
    ):
        with pytest.raises(chillfl.ConfigError) as info:
            groups(train_groups, test_groups)
        assert info.value.field == field and "client " in info.value.message


def test_one_sample_batches_a_model_cannot_train_on_are_refused_before_the_run(tmp_path: Path) -> None:
    """fedchill_cnn1's BatchNorm1d cannot normalise one sample: batch_size 1, or a client holding one sample (which
    quantity_skew's default min_size = 1 gives), was a ValueError traceback in round 1."""
    from chillfl.config import config_from_dict
    from chillfl.experiment import build_experiment

    base = {"dataset": {"name": "digits"}, "model": {"name": "fedchill_cnn1"}, "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1}}
    with pytest.raises(ConfigError, match="is 1, and .* cannot train on a batch of one sample") as info:
        build_experiment(config_from_dict({**base, "partition": {"name": "iid"}, "client": {"batch_size": 1}}))
    assert info.value.field == "client.batch_size"
    path = tmp_path / "partition.json"  # digits' 1438 training samples: two clients of one
    path.write_text(json.dumps({"format": "chillfl-partition", "clients": [list(range(1436)), [1436], [1437]]}))
    with pytest.raises(ConfigError, match=r"gives 2 client\(s\) a single training sample \(client 1\)") as info:
        build_experiment(config_from_dict({**base, "partition": {"from": str(path)}}))
    assert info.value.field == "partition"

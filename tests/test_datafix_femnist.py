"""``femnist``'s ``max_writers`` cuts after the 1-sample writers are dropped (it cut first, and could give fewer than
N writers where N usable ones exist), as ``flwr_femnist``'s ``max_clients`` does."""

from __future__ import annotations

from pathlib import Path

from chillfl.data import load_dataset
from fake_datasets import leaf_json


def test_max_writers_keeps_the_first_n_writers_with_two_samples(tmp_path: Path) -> None:
    folder = tmp_path / "femnist" / "all_data"
    folder.mkdir(parents=True)
    # w1 has one sample: LEAF's split drops it, so the first 3 usable writers are w0, w2, w3
    (folder / "all_data_0.json").write_bytes(leaf_json({"w0": [0] * 6, "w1": [1], "w2": [2] * 5, "w3": [3] * 7, "w4": [4] * 4}))
    ds = load_dataset("femnist", {"max_writers": 3}, data_dir=tmp_path)
    assert ds.train_groups is not None and ds.test_groups is not None
    # max(1, floor(0.9 n)) train samples each, the rest test: n = 6, 5, 7
    assert [len(g) for g in ds.train_groups] == [5, 4, 6] and [len(g) for g in ds.test_groups] == [1, 1, 1]
    assert sorted(set(ds.y_train.tolist())) == [0, 2, 3]

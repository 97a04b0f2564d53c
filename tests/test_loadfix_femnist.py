"""LEAF's train/ and test/ folders read as the per-writer split the docs promise: a test writer missing from train/
was dropped from the global test set silently, a -t user split and a train/ without test/ were "missing or corrupt
files?" after a cache entry was written (report-loaders findings 2, 7)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.data import load_dataset
from chillfl.data.arraycache import CACHE_DIR
from chillfl.errors import ConfigError
from fake_datasets import leaf_json
from test_dataset_formats import _write


def _refused(name: str, data_dir: Path, words: str, options: dict | None = None) -> str:
    """The one ``data_dir`` line ``name`` is refused with (``words`` a regex it matches)."""
    with pytest.raises(ConfigError, match=words) as info:
        load_dataset(name, options, data_dir=data_dir)
    assert info.value.field == "data_dir" and "\n" not in info.value.message
    return info.value.message


def _cache_entries(data_dir: Path) -> list[str]:
    cache = data_dir / CACHE_DIR
    return sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) if cache.is_dir() else []


def test_femnist_test_writers_not_in_train_are_refused_not_dropped(tmp_path: Path) -> None:
    """Test writers c, d (2 + 3 samples) are not in train/: before, the global test set silently held a's 2 samples only."""
    _write({"femnist/data/train/tr.json": leaf_json({"a": [0, 1, 2, 3], "b": [4, 5, 6]}),
            "femnist/data/test/te.json": leaf_json({"a": [7, 8], "c": [9, 9], "d": [1, 2, 3]})}, tmp_path)
    message = _refused("femnist", tmp_path, r"test holds 2 writer\(s\) \(5 samples\) not in .*train, e.g. 'c'")
    assert "-t sample" in message and "-t user" not in message  # some writers are shared: not a user split
    assert _cache_entries(tmp_path) == []


def test_femnist_leaf_user_split_is_named(tmp_path: Path) -> None:
    """LEAF's ``split_data.py -t user`` (train and test writers disjoint): said as such, not "missing or corrupt files"."""
    _write({"femnist/train/tr.json": leaf_json({"a": [0, 1], "b": [4]}), "femnist/test/te.json": leaf_json({"c": [9, 9, 9]})}, tmp_path)
    message = _refused("femnist", tmp_path, r"1 writer\(s\) \(3 samples\) not in")
    assert "'-t user' split" in message and "missing or corrupt" not in message


def test_femnist_train_without_test_folder_says_so_and_caches_nothing(tmp_path: Path) -> None:
    _write({"femnist/train/tr.json": leaf_json({"a": [0, 1], "b": [4]})}, tmp_path)
    _refused("femnist", tmp_path, r"femnist/train has no test/ beside it")
    assert _cache_entries(tmp_path) == []


def test_femnist_test_writers_within_train_load_as_before(tmp_path: Path) -> None:
    """Every test writer in train/ (LEAF's -t sample): each writer's own test part, a train writer without one keeps none."""
    _write({"femnist/train/tr.json": leaf_json({"a": [0, 1, 2], "b": [4, 5], "e": [6]}),
            "femnist/test/te.json": leaf_json({"b": [7], "a": [8, 9]})}, tmp_path)
    ds = load_dataset("femnist", data_dir=tmp_path)
    assert ds.y_train.tolist() == [0, 1, 2, 4, 5, 6] and ds.y_test.tolist() == [8, 9, 7]
    assert [g.tolist() for g in ds.test_groups] == [[0, 1], [2], []]

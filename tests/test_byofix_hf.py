"""``hf`` labels checked in both splits (byodata finding 4) and a NaN image column named as such (finding 7)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")  # the `test` extra installs it; skipped only outside CI's environment

from chillfl.data import load_dataset  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402


def parquet_pair(root: Path, train: dict[str, list[Any]], test: dict[str, list[Any]]) -> str:
    """A folder of train.parquet and test.parquet, written by pyarrow from plain columns (None: a null)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir()
    pq.write_table(pa.table(train), str(root / "train.parquet"))
    pq.write_table(pa.table(test), str(root / "test.parquet"))
    return str(root)


@pytest.mark.parametrize("train,test,words", [
    ([0, 1, 2, 0, 1, 2], [0.0, 1.9, 2.5], "holds neither class ids nor class names in the test split (dtype float64)"),
    ([0, 1, 2, 0, 1, 2], [0, None, 2], "missing labels (null) in the test split"),
    (["a", "b", None, "a", "b", "c"], ["a", "b", "c"], "missing labels (null) in the train split"),
    (["a", "b", "c", "a", "b", "c"], ["a", None, "c"], "missing labels (null) in the test split"),
])
def test_labels_are_checked_in_both_splits(tmp_path: Path, train: list[Any], test: list[Any], words: str) -> None:
    """Float test labels beside int train labels were truncated to ints (1.9 -> 1), silently; a null test label
    crashed with a TypeError; a null among string labels read as 'object labels in the train split'."""
    path = parquet_pair(tmp_path / "p", {"f0": [float(i) for i in range(len(train))], "label": train},
                        {"f0": [float(i) for i in range(len(test))], "label": test})
    with pytest.raises(ConfigError) as err:
        load_dataset("hf", {"path": path, "feature_columns": ["f0"]})
    assert err.value.field == "dataset.label_column" and words in err.value.message, err.value


def test_whole_labels_in_both_splits_still_load(tmp_path: Path) -> None:
    path = parquet_pair(tmp_path / "p", {"f0": [0.0, 1.0, 2.0, 3.0], "label": [0, 1, 2, 0]}, {"f0": [4.0, 5.0], "label": [1, 2]})
    ds = load_dataset("hf", {"path": path, "feature_columns": ["f0"]})
    assert ds.y_test.tolist() == [1, 2] and ds.num_classes == 3


def test_a_huge_integer_label_is_one_line_not_a_memory_error(tmp_path: Path) -> None:
    """max + 1 = 10**12 + 1 classes tried to allocate 7.28 TiB (a MemoryError traceback)."""
    path = parquet_pair(tmp_path / "p", {"f0": [0.0, 1.0, 2.0, 3.0], "label": [0, 1, 10**12, 0]}, {"f0": [4.0, 5.0], "label": [1, 0]})
    with pytest.raises(ConfigError) as err:
        load_dataset("hf", {"path": path, "feature_columns": ["f0"]})
    assert err.value.field == "dataset.label_column" and "labels run to 1,000,000,000,000 but only 3 distinct values occur" in err.value.message

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
    ([0, 1, 2, 0, 1, 2], [0.0, 1.9, 2.5], "holds neither class ids nor class names in split 'test' (dtype float64)"),
    ([0, 1, 2, 0, 1, 2], [0, None, 2], "missing labels (null) in split 'test'"),
    (["a", "b", None, "a", "b", "c"], ["a", "b", "c"], "missing labels (null) in split 'train'"),
    (["a", "b", "c", "a", "b", "c"], ["a", None, "c"], "missing labels (null) in split 'test'"),
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


def test_nan_in_an_image_array_column_names_the_image_column(tmp_path: Path) -> None:
    """An Array3D float column with one NaN was blamed on data_dir ('corrupt files?'), though dataset.path found it."""
    feature = datasets.Features({"img": datasets.Array3D((1, 2, 2), "float32"), "label": datasets.Value("int64")})

    def split(n: int, nan_row: int | None) -> "datasets.Dataset":
        imgs = [np.full((1, 2, 2), float(i), dtype=np.float32) for i in range(n)]
        if nan_row is not None:
            imgs[nan_row][0, 1, 1] = np.nan
        return datasets.Dataset.from_dict({"img": imgs, "label": [i % 2 for i in range(n)]}, features=feature)

    root = tmp_path / "arr_nan"
    datasets.DatasetDict({"train": split(6, None), "test": split(4, 2)}).save_to_disk(str(root))
    with pytest.raises(ConfigError) as err:
        load_dataset("hf", {"path": str(root)})
    assert err.value.field == "dataset.image_column", err.value
    assert "column 'img' of split 'test'" in err.value.message and "row 2" in err.value.message


def test_the_refusals_name_the_configured_splits(tmp_path: Path) -> None:
    """Splits named training/validation: the missing-label and NaN-image lines name them, as the -1-label line does (they
    said 'train'/'test', splits that path does not have)."""
    path = parquet_pair(tmp_path / "p", {"f0": [0.0, 1.0, 2.0, 3.0], "label": [0, 1, 2, 0]}, {"f0": [4.0, 5.0, 6.0], "label": [0, None, 2]})
    (Path(path) / "train.parquet").rename(Path(path) / "training.parquet")
    (Path(path) / "test.parquet").rename(Path(path) / "validation.parquet")
    with pytest.raises(ConfigError) as err:
        load_dataset("hf", {"path": path, "feature_columns": ["f0"], "train_split": "training", "test_split": "validation"})
    assert "missing labels (null) in split 'validation'" in err.value.message, err.value
    feature = datasets.Features({"img": datasets.Array3D((1, 2, 2), "float32"), "label": datasets.Value("int64")})
    imgs = [np.full((1, 2, 2), float(i), dtype=np.float32) for i in range(4)]
    imgs[1][0, 0, 0] = np.inf
    good = datasets.Dataset.from_dict({"img": [np.zeros((1, 2, 2), dtype=np.float32)] * 4, "label": [0, 1, 0, 1]}, features=feature)
    bad = datasets.Dataset.from_dict({"img": imgs, "label": [0, 1, 0, 1]}, features=feature)
    root = tmp_path / "arr"
    datasets.DatasetDict({"training": good, "validation": bad}).save_to_disk(str(root))
    with pytest.raises(ConfigError) as err:
        load_dataset("hf", {"path": str(root), "train_split": "training", "test_split": "validation"})
    assert "column 'img' of split 'validation'" in err.value.message and "row 1" in err.value.message, err.value

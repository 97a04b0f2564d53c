"""idx datasets: MNIST's and Fashion-MNIST's files (which share all four names) are never read as each other's from a
flat folder; torchvision's gunzipped EMNIST/raw is found; label errors name the labels file (report-loaders findings
3, 6, 12)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from chillfl.data import load_dataset, loaders
from fake_datasets import emnist_files, idx_bytes
from test_dataset_formats import _unzip
from test_loadfix_femnist import _refused


def _idx_set(root: Path, train: np.ndarray, test: np.ndarray, gz: bool = False) -> None:
    root.mkdir(parents=True, exist_ok=True)
    files = {"train-images-idx3-ubyte": train, "train-labels-idx1-ubyte": np.arange(len(train)) % 10,
             "t10k-images-idx3-ubyte": test, "t10k-labels-idx1-ubyte": np.arange(len(test)) * 3 % 10}
    for name, array in files.items():
        data = idx_bytes(np.asarray(array, dtype=np.uint8))
        (root / (name + ".gz" if gz else name)).write_bytes(gzip.compress(data) if gz else data)


def _small(root: Path, gz: bool = False) -> None:
    rng = np.random.default_rng(0)
    _idx_set(root, rng.integers(0, 256, (20, 28, 28)), rng.integers(0, 256, (10, 28, 28)), gz)


def test_a_flat_folder_of_one_idx_set_is_not_read_as_the_other(tmp_path: Path) -> None:
    """MNIST's and Fashion-MNIST's files share all four names: a folder named for one is not read as the other."""
    _small(tmp_path / "d1" / "mnist")
    _small(tmp_path / "d2" / "MNIST" / "raw", gz=True)
    _small(tmp_path / "d3" / "FashionMNIST" / "raw", gz=True)
    _small(tmp_path / "d4" / "fashion-mnist" / "data" / "fashion", gz=True)  # Zalando's repository
    for folder in (tmp_path / "d1" / "mnist", tmp_path / "d2" / "MNIST" / "raw"):
        message = _refused("fashion_mnist", folder, "are MNIST's, not Fashion-MNIST's")
        assert "chillfl data download fashion_mnist" in message
        assert load_dataset("mnist", data_dir=folder).y_train.tolist() == [i % 10 for i in range(20)]
    for folder in (tmp_path / "d3" / "FashionMNIST" / "raw", tmp_path / "d4" / "fashion-mnist" / "data" / "fashion"):
        _refused("mnist", folder, "are Fashion-MNIST's, not MNIST's")
        assert load_dataset("fashion_mnist", data_dir=folder).y_test.tolist() == [i * 3 % 10 for i in range(10)]
    # torchvision's layout under data_dir is found by its own folder, as before
    assert len(load_dataset("mnist", data_dir=tmp_path / "d2").y_train) == 20
    _refused("fashion_mnist", tmp_path / "d2", "Fashion-MNIST not found at .*d2/fashion_mnist")


def test_a_flat_folder_given_as_dot_is_named_by_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``data_dir = "."`` inside ``MNIST/raw`` or ``fashion_mnist``: the folder's own name still says whose files they are."""
    _small(tmp_path / "MNIST" / "raw")
    _small(tmp_path / "fashion_mnist")
    monkeypatch.chdir(tmp_path / "MNIST" / "raw")
    assert len(load_dataset("mnist", data_dir=".").y_train) == 20
    _refused("fashion_mnist", Path("."), "are MNIST's, not Fashion-MNIST's")
    monkeypatch.chdir(tmp_path / "fashion_mnist")
    assert len(load_dataset("fashion_mnist", data_dir=".").y_test) == 10
    _refused("mnist", Path("."), "are Fashion-MNIST's, not MNIST's")


def test_a_flat_folder_that_does_not_say_whose_files_is_refused(tmp_path: Path) -> None:
    _small(tmp_path / "data")
    for name in ("mnist", "fashion_mnist"):
        _refused(name, tmp_path / "data", r"cannot tell whether the idx files directly in .*/data are MNIST's or Fashion-MNIST's")


def test_the_published_files_are_told_apart_by_their_pixels(tmp_path: Path) -> None:
    """Full-size sets (60,000 + 10,000 images) in a folder with a neutral name: MNIST's mean pixel is 33.3, Fashion's 72.9."""
    for folder, value, own, other in (("a", 34, "mnist", "fashion_mnist"), ("b", 72, "fashion_mnist", "mnist")):
        _idx_set(tmp_path / folder, np.full((60_000, 28, 28), value, np.uint8), np.full((10_000, 28, 28), value, np.uint8))
        _refused(other, tmp_path / folder, "by their pixels")
        raw = (loaders.load_mnist if own == "mnist" else loaders.load_fashion_mnist)(tmp_path / folder, loaders.NoOptions())
        assert raw.x_train.shape == (60_000, 1, 28, 28) and int(raw.x_test[9, 0, 27, 27]) == value


def test_emnist_reads_torchvisions_gunzipped_raw_folder(tmp_path: Path) -> None:
    _unzip(emnist_files()["gzip.zip"], tmp_path / "nist" / "emnist")  # NIST's layout: emnist/gzip/*.gz
    raw = tmp_path / "tv" / "EMNIST" / "raw"
    raw.mkdir(parents=True)
    for gz in sorted((tmp_path / "nist" / "emnist" / "gzip").iterdir()):
        (raw / gz.name.removesuffix(".gz")).write_bytes(gzip.decompress(gz.read_bytes()))
    want = load_dataset("emnist", {"split": "letters"}, data_dir=tmp_path / "nist")
    got = load_dataset("emnist", {"split": "letters"}, data_dir=tmp_path / "tv")
    assert got.y_train.tolist() == want.y_train.tolist() == [0, 25, 4]
    assert bool((got.x_train == want.x_train).all()) and bool((got.x_test == want.x_test).all())


def test_idx_label_errors_name_the_labels_file(tmp_path: Path) -> None:
    root = tmp_path / "mnist"
    _small(root)
    (root / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.array([12] + [1] * 19, np.uint8)))
    _refused("mnist", tmp_path, r"train-labels-idx1-ubyte: corrupt or wrong format \(labels outside 0..9, MNIST's range \(got 1..12\)\)")
    (root / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(18, np.uint8)))
    _refused("mnist", tmp_path, r"train-images-idx3-ubyte: corrupt or wrong format \(images \(20, 28, 28\) do not match labels \(18,\) of train-labels-idx1-ubyte\)")


def test_an_emnist_label_out_of_range_names_its_file(tmp_path: Path) -> None:
    _unzip(emnist_files()["gzip.zip"], tmp_path / "e" / "emnist")
    bad = tmp_path / "e" / "emnist" / "gzip" / "emnist-letters-test-labels-idx1-ubyte.gz"
    bad.write_bytes(gzip.compress(idx_bytes(np.array([0, 2], np.uint8))))  # letters are 1..26
    _refused("emnist", tmp_path / "e", r"emnist-letters-test-labels-idx1-ubyte.gz: corrupt or wrong format \(labels outside 1..26", {"split": "letters"})

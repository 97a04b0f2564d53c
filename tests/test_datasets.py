"""Datasets: embedded generators, real-format readers on tiny files written in tmp_path, errors."""

from __future__ import annotations

import gzip
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.io import savemat

from chillfl.data.datasets import dataset_names, load_dataset, standardise, stratified_split, synthetic_client
from chillfl.data.loaders import HAR_SIGNALS
from chillfl.errors import ConfigError

# ---------------------------------------------------------------- helpers


def test_standardise_by_hand() -> None:
    # channel 0 train values 0, 2 -> mean 1, std 1 -> -1, 1; test value 4 -> (4 - 1) / 1 = 3.
    # channel 1 is constant 5 -> std 0 is replaced by 1 -> 0; test 7 -> 2.
    x_train = np.array([[[0.0], [5.0]], [[2.0], [5.0]]])  # [N=2, C=2, 1]
    x_test = np.array([[[4.0], [7.0]]])
    tr, te = standardise(x_train, x_test)
    assert tr.dtype == torch.float32
    assert tr[:, 0, 0].tolist() == [-1.0, 1.0] and tr[:, 1, 0].tolist() == [0.0, 0.0]
    assert te[0, :, 0].tolist() == [3.0, 2.0]


def test_stratified_split_by_hand() -> None:
    # class 0: 10 samples -> round(0.2 * 10) = 2 test; class 1: 5 -> round(1.0) = 1 test.
    labels = np.array([0] * 10 + [1] * 5)
    train, test = stratified_split(labels, 0.2, np.random.default_rng(0))
    assert np.bincount(labels[test]).tolist() == [2, 1]
    assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(15))


def test_registry_and_unknown_name() -> None:
    expected = ["digits", "mnist1d", "synthetic", "cifar10", "cifar100", "svhn", "mnist", "fashion_mnist", "uci_har", "emnist", "femnist", "tiny_imagenet", "caltech256", "hf",
                "flwr_femnist", "flwr_shakespeare"]
    assert dataset_names() == sorted(expected)
    with pytest.raises(ConfigError) as info:
        load_dataset("cifar11")
    assert info.value.field == "dataset.name" and "allowed: caltech256, cifar10, cifar100, digits" in info.value.message


@pytest.mark.parametrize(
    "name,options,field",
    [
        ("digits", {"test_fraction": 1.0}, "dataset.test_fraction"),
        ("digits", {"size": 3}, "dataset.size"),
        ("mnist1d", {"num_samples": 10}, "dataset.num_samples"),
        ("synthetic", {"alpha": -1.0}, "dataset.alpha"),
        ("synthetic", {"num_clients": 0}, "dataset.num_clients"),
        ("cifar100", {"labels": "medium"}, "dataset.labels"),
    ],
)
def test_bad_options(name: str, options: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_dataset(name, options)
    assert info.value.field == field


# ---------------------------------------------------------------- embedded


def test_digits_fixed_stratified_split() -> None:
    a, b = load_dataset("digits"), load_dataset("digits", {"split_seed": 0})
    assert a.x_train.shape == (1797 - 359, 1, 8, 8) and a.x_test.shape == (359, 1, 8, 8)
    assert a.input_shape == (1, 8, 8) and a.num_classes == 10
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    # sklearn digits has 178, 182, 177, ... per class; each test share is round(0.2 * n_c) (e.g. 178 -> 36).
    assert int((a.y_test == 0).sum()) == 36
    assert float(a.x_train.mean()) == pytest.approx(0.0, abs=1e-5) and float(a.x_train.std()) == pytest.approx(1.0, abs=1e-3)


def test_mnist1d_generated_and_rng_untouched() -> None:
    random.seed(7)
    np.random.seed(7)
    before = (random.random(), np.random.rand())
    random.seed(7)
    np.random.seed(7)
    ds = load_dataset("mnist1d", {"num_samples": 500})
    assert (random.random(), np.random.rand()) == before  # global RNGs restored
    # 500 // 10 = 50 per class; 80 % train -> 400 / 100.
    assert ds.x_train.shape == (400, 1, 40) and ds.x_test.shape == (100, 1, 40)
    assert ds.y_train.dtype == torch.int64 and ds.num_classes == 10
    again = load_dataset("mnist1d", {"num_samples": 500})
    assert torch.equal(ds.x_train, again.x_train)
    other = load_dataset("mnist1d", {"num_samples": 500, "seed": 1})
    assert not torch.equal(ds.x_train, other.x_train)


def test_mnist1d_is_generated_once_a_process_for_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """A comparison loads the dataset once a seed: the generated arrays are made once for the options, and each
    dataset gets its own tensors (equal to a fresh generation's, sharing no memory with the cache or each other)."""
    import mnist1d.data

    from chillfl.data import datasets

    datasets._mnist1d_arrays.cache_clear()
    fresh = load_dataset("mnist1d", {"num_samples": 200})
    real = mnist1d.data.make_dataset
    made: list[int] = []

    def counted(args: object) -> dict:  # type: ignore[type-arg]
        made.append(1)
        return real(args)

    monkeypatch.setattr(mnist1d.data, "make_dataset", counted)
    datasets._mnist1d_arrays.cache_clear()
    first, second = load_dataset("mnist1d", {"num_samples": 200}), load_dataset("mnist1d", {"num_samples": 200})
    assert made == [1]  # generated once, the second load from the cache
    for a, b in ((first.x_train, fresh.x_train), (second.x_train, fresh.x_train), (second.y_test, fresh.y_test)):
        assert torch.equal(a, b) and a.dtype == b.dtype
    first.x_train[0, 0, 0] += 1.0
    first.y_train[0] += 1
    assert torch.equal(second.x_train, fresh.x_train) and torch.equal(second.y_train, fresh.y_train)  # no memory shared
    load_dataset("mnist1d", {"num_samples": 200, "seed": 1})
    assert made == [1, 1]  # other options: generated


def test_synthetic_groups_cover_the_split() -> None:
    ds = load_dataset("synthetic", {"num_clients": 5, "seed": 3})
    assert ds.input_shape == (60,) and ds.num_classes == 10
    assert ds.train_groups is not None and ds.test_groups is not None and len(ds.train_groups) == 5
    assert np.array_equal(np.concatenate(ds.train_groups), np.arange(len(ds.y_train)))
    assert np.array_equal(np.concatenate(ds.test_groups), np.arange(len(ds.y_test)))
    for tr, te in zip(ds.train_groups, ds.test_groups):
        n = len(tr) + len(te)
        assert n >= 50 and len(te) == int(np.floor(0.2 * n + 0.5))  # min_samples 50; 80/20 per client
    assert torch.equal(load_dataset("synthetic", {"num_clients": 5, "seed": 3}).x_train, ds.x_train)


def test_synthetic_covariance_is_j_pow_minus_1_2() -> None:
    # Sigma_jj = j^-1.2: j = 1 -> 1; j = 2 -> 2^-1.2 = 0.4353; j = 60 -> exp(-1.2 ln 60) = exp(-4.913) = 0.00735.
    x, y = synthetic_client(np.random.default_rng(0), 20000, 1.0, 1.0, 60, 10)
    var = x.var(axis=0)
    assert var[0] == pytest.approx(1.0, rel=0.05)
    assert var[1] == pytest.approx(0.4353, rel=0.05)
    assert var[59] == pytest.approx(0.00735, rel=0.05)
    assert x.dtype == np.float32 and y.min() >= 0 and y.max() <= 9


def test_synthetic_labels_are_argmax_of_a_linear_model() -> None:
    # y = argmax(W x + b): a large-C logistic regression separates one client's data almost perfectly,
    # while shuffled labels cannot be fitted.
    from sklearn.linear_model import LogisticRegression

    x, y = synthetic_client(np.random.default_rng(1), 1000, 0.0, 0.0, 10, 3)
    fit = LogisticRegression(C=1e4, max_iter=2000).fit(x, y).score(x, y)
    shuffled = LogisticRegression(C=1e4, max_iter=2000).fit(x, np.random.default_rng(0).permutation(y)).score(x, y)
    assert fit > 0.98 > 0.7 > shuffled


# ---------------------------------------------------------------- real formats in tmp_path


def _pickle(path: Path, obj: dict) -> None:
    with open(path, "wb") as f:
        pickle.dump(obj, f)


def _images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, 3072), dtype=np.uint8)


def test_cifar10_pickles(tmp_path: Path) -> None:
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    batches = [_images(4, i) for i in range(6)]
    for i in range(5):
        _pickle(root / f"data_batch_{i + 1}", {b"data": batches[i], b"labels": [i, i, 9, 0]})
    _pickle(root / "test_batch", {b"data": batches[5], b"labels": [1, 2, 3, 4]})
    ds = load_dataset("cifar10", data_dir=tmp_path)
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32)
    assert ds.y_train[:8].tolist() == [0, 0, 9, 0, 1, 1, 9, 0] and ds.y_test.tolist() == [1, 2, 3, 4]
    # layout: bytes 0..1023 are the red plane, row-major -> pixel (r=1, c=2) of red is byte 34.
    raw = np.concatenate(batches[:5]).astype(np.float64) / 255
    red = raw[:, :1024]
    expected = (raw[0, 34] - red.mean()) / red.std()
    assert float(ds.x_train[0, 0, 1, 2]) == pytest.approx(expected, rel=1e-5)
    assert float(ds.x_train[:, 2].mean()) == pytest.approx(0.0, abs=1e-5)


def test_cifar100_fine_and_coarse(tmp_path: Path) -> None:
    root = tmp_path / "cifar-100-python"
    root.mkdir()
    for name, seed in (("train", 0), ("test", 1)):
        _pickle(root / name, {b"data": _images(3, seed), b"fine_labels": [99, 5, 0], b"coarse_labels": [19, 1, 0]})
    fine = load_dataset("cifar100", data_dir=tmp_path)
    coarse = load_dataset("cifar100", {"labels": "coarse"}, data_dir=tmp_path)
    assert fine.num_classes == 100 and fine.y_train.tolist() == [99, 5, 0]
    assert coarse.num_classes == 20 and coarse.y_test.tolist() == [19, 1, 0]


def test_svhn_mat(tmp_path: Path) -> None:
    gen = np.random.default_rng(0)
    for split, labels in (("train", [10, 1, 5]), ("test", [3, 10])):
        x = gen.integers(0, 256, size=(32, 32, 3, len(labels)), dtype=np.uint8)
        savemat(tmp_path / f"{split}_32x32.mat", {"X": x, "y": np.array(labels, dtype=np.uint8)[:, None]})
    ds = load_dataset("svhn", data_dir=tmp_path)
    assert ds.y_train.tolist() == [0, 1, 5] and ds.y_test.tolist() == [3, 0]  # label 10 is digit 0
    assert ds.x_train.shape == (3, 3, 32, 32)


def _idx(path: Path, array: np.ndarray, compress: bool) -> None:
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    data = header + array.astype(np.uint8).tobytes()
    if compress:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def _write_mnist(root: Path, compress: bool) -> np.ndarray:
    root.mkdir(parents=True)
    images = np.zeros((4, 28, 28), dtype=np.uint8)
    images[0, 3, 5] = 255  # one bright pixel at row 3, column 5 of the first image
    _idx(root / "train-images-idx3-ubyte", images, compress)
    _idx(root / "train-labels-idx1-ubyte", np.array([7, 0, 1, 9]), compress)
    _idx(root / "t10k-images-idx3-ubyte", images[:2], compress)
    _idx(root / "t10k-labels-idx1-ubyte", np.array([2, 3]), compress)
    return images


@pytest.mark.parametrize("name,folder,compress", [("mnist", "mnist", False), ("fashion_mnist", "FashionMNIST/raw", True)])
def test_idx_files(tmp_path: Path, name: str, folder: str, compress: bool) -> None:
    _write_mnist(tmp_path / folder, compress)
    ds = load_dataset(name, data_dir=tmp_path)
    assert ds.x_train.shape == (4, 1, 28, 28) and ds.y_train.tolist() == [7, 0, 1, 9] and ds.y_test.tolist() == [2, 3]
    # 1 of 4 * 784 pixels is 1.0, the rest 0: the bright one is the maximum, at [0, 0, 3, 5].
    assert int(ds.x_train.flatten().argmax()) == 3 * 28 + 5


def test_uci_har_text_files(tmp_path: Path) -> None:
    root = tmp_path / "UCI HAR Dataset"
    for split, labels in (("train", [1, 6, 3]), ("test", [2, 2])):
        signals = root / split / "Inertial Signals"
        signals.mkdir(parents=True)
        for ch, signal in enumerate(HAR_SIGNALS):
            rows = np.full((len(labels), 128), float(ch)) + np.arange(len(labels))[:, None]
            np.savetxt(signals / f"{signal}_{split}.txt", rows, fmt="%.6e")
        np.savetxt(root / split / f"y_{split}.txt", labels, fmt="%d")
    ds = load_dataset("uci_har", data_dir=tmp_path)
    assert ds.input_shape == (9, 128) and ds.num_classes == 6
    assert ds.y_train.tolist() == [0, 5, 2] and ds.y_test.tolist() == [1, 1]
    # channel ch of sample i is ch + i; per channel train values 0,1,2 (+ch): mean 1 + ch, std sqrt(2/3)
    # -> sample 2 is (2 - 1) / 0.8165 = 1.2247 in every channel.
    assert torch.allclose(ds.x_train[2], torch.full((9, 128), 1.2247), atol=1e-4)


# ---------------------------------------------------------------- missing and corrupt files


@pytest.mark.parametrize("name,url", [
    ("cifar10", "cs.toronto.edu"),
    ("cifar100", "cs.toronto.edu"),
    ("svhn", "ufldl.stanford.edu"),
    ("mnist", "yann.lecun.com"),
    ("fashion_mnist", "zalandoresearch"),
    ("uci_har", "archive.ics.uci.edu"),
])
def test_missing_data_dir(tmp_path: Path, name: str, url: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_dataset(name, data_dir=tmp_path / "nowhere")
    assert info.value.field == "data_dir"
    assert "not found at" in info.value.message and "expected" in info.value.message and url in info.value.message


def test_missing_single_file(tmp_path: Path) -> None:
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    _pickle(root / "data_batch_1", {b"data": _images(2, 0), b"labels": [0, 1]})
    with pytest.raises(ConfigError, match="data_batch_2"):
        load_dataset("cifar10", data_dir=tmp_path)


def test_corrupt_files(tmp_path: Path) -> None:
    root = tmp_path / "cifar-100-python"
    root.mkdir()
    (root / "train").write_bytes(b"not a pickle")
    with pytest.raises(ConfigError, match="corrupt") as info:
        load_dataset("cifar100", data_dir=tmp_path)
    assert info.value.field == "data_dir"

    _write_mnist(tmp_path / "mnist", compress=False)
    (tmp_path / "mnist" / "t10k-labels-idx1-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x09\x01")  # says 9, has 1
    with pytest.raises(ConfigError, match="corrupt"):
        load_dataset("mnist", data_dir=tmp_path)

    _pickle(root / "train", {b"data": _images(2, 0), b"fine_labels": [0, 150]})
    _pickle(root / "test", {b"data": _images(2, 0), b"fine_labels": [0, 1]})
    with pytest.raises(ConfigError, match="labels outside"):
        load_dataset("cifar100", data_dir=tmp_path)

    (tmp_path / "train_32x32.mat").write_bytes(b"garbage" * 10)
    with pytest.raises(ConfigError, match="corrupt"):
        load_dataset("svhn", data_dir=tmp_path)


def _write_har(root: Path, train_labels: list[int], test_labels: list[int], value: float = 0.0) -> None:
    for split, labels in (("train", train_labels), ("test", test_labels)):
        signals = root / split / "Inertial Signals"
        signals.mkdir(parents=True, exist_ok=True)
        for signal in HAR_SIGNALS:
            np.savetxt(signals / f"{signal}_{split}.txt", np.full((len(labels), 128), value), fmt="%.6e")
        np.savetxt(root / split / f"y_{split}.txt", np.array(labels, dtype=np.int64), fmt="%d")


@pytest.mark.filterwarnings("error")  # one error line, no numpy warning printed before it
def test_wrong_values_empty_splits_and_mismatched_shapes_are_refused(tmp_path: Path) -> None:
    """Files in the right format with wrong contents: a data_dir error, not a silently wrapped pixel or label,
    a NaN loss, a traceback in the first evaluation, or numpy's 'no data' warning."""
    def refused(name: str, data_dir: Path, words: str) -> None:
        with pytest.raises(ConfigError, match=words) as info:
            load_dataset(name, data_dir=data_dir)
        assert info.value.field == "data_dir"

    cifar = tmp_path / "cifar" / "cifar-100-python"
    cifar.mkdir(parents=True)
    _pickle(cifar / "train", {b"data": np.full((2, 3072), 300.0), b"fine_labels": [0, 1]})  # float pixels past 255
    _pickle(cifar / "test", {b"data": _images(2, 0), b"fine_labels": [0, 1]})
    refused("cifar100", cifar.parent, r"pixels must be in \[0, 255\]")

    svhn = tmp_path / "svhn"
    svhn.mkdir()
    for split, labels in (("train", [1.5, 2.0]), ("test", [3.0, 4.0])):
        savemat(svhn / f"{split}_32x32.mat", {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.array(labels)[:, None]})
    refused("svhn", svhn, "labels must be integers")  # whole numbers stored as doubles are fine; 1.5 is not a label

    mnist = tmp_path / "mnist"
    _write_mnist(mnist, compress=False)
    _idx(mnist / "t10k-images-idx3-ubyte", np.zeros((2, 8, 8)), compress=False)
    refused("mnist", tmp_path, r"t10k-images-idx3-ubyte: corrupt or wrong format \(images are 8x8, MNIST's are 28x28\)")
    _idx(mnist / "t10k-images-idx3-ubyte", np.zeros((0, 28, 28)), compress=False)
    _idx(mnist / "t10k-labels-idx1-ubyte", np.zeros(0), compress=False)
    refused("mnist", tmp_path, "test split is empty")

    _write_har(tmp_path / "har" / "UCI HAR Dataset", [1, 2], [1, 2], value=float("nan"))
    refused("uci_har", tmp_path / "har", "NaN")
    (tmp_path / "har" / "UCI HAR Dataset" / "test" / "y_test.txt").write_text("")
    refused("uci_har", tmp_path / "har", "0 labels")


def test_damaged_gzip_stream_is_one_data_dir_line(tmp_path: Path) -> None:
    """A .gz whose header is fine but whose deflate data is damaged raises zlib.error (not an OSError) in gzip:
    it must still be refused as a corrupt file, not escape as a traceback."""
    _write_mnist(tmp_path / "mnist", compress=True)
    path = tmp_path / "mnist" / "train-images-idx3-ubyte.gz"
    blob = bytearray(gzip.compress(gzip.decompress(path.read_bytes()), mtime=0))  # header without a file name: 10 bytes
    blob[10:20] = b"\xff" * 10  # the first bytes of the deflate stream
    path.write_bytes(bytes(blob))
    with pytest.raises(ConfigError, match="train-images-idx3-ubyte.gz: corrupt") as info:
        load_dataset("mnist", data_dir=tmp_path)
    assert info.value.field == "data_dir"


def test_a_pickle_claiming_an_absurd_size_names_why(tmp_path: Path) -> None:
    """A protocol-5 bytearray of 2**62 bytes fails with a MemoryError whose message is empty: the line said '()'."""
    root = tmp_path / "cifar-100-python"
    root.mkdir()
    (root / "train").write_bytes(b"\x80\x05\x96" + (2**62).to_bytes(8, "little") + b"x.")
    with pytest.raises(ConfigError, match=r"corrupt or wrong format \(MemoryError\)") as info:
        load_dataset("cifar100", data_dir=tmp_path)
    assert info.value.field == "data_dir"

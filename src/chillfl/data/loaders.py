"""Readers for the real datasets' standard on-disk formats.

Each reader returns a :class:`RawSplit` of numpy arrays laid out as
``[N, channels, ...]``; ``chillfl.data.datasets`` scales and normalises them.
Nothing is downloaded: a missing or unreadable file raises
:class:`~chillfl.errors.ConfigError` naming ``data_dir``, the files expected and
where to get them.

Choices
-------
* A reader looks for its files in ``data_dir/<usual folder>`` first and then
  in ``data_dir`` itself (e.g. ``data/cifar-10-batches-py`` or a ``data_dir``
  that already points there); MNIST-style files may also sit in torchvision's
  ``MNIST/raw`` / ``FashionMNIST/raw`` folders, plain or gzipped.
* CIFAR-100 uses the 100 fine labels by default (``labels = "coarse"`` for 20).
* No file executes code: the CIFAR pickles are read by :class:`CifarUnpickler`,
  which admits only the few numpy callables the format uses; SVHN ``.mat``
  files (scipy), idx files and HAR text files are parsed, never unpickled.
"""

from __future__ import annotations

import gzip
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from chillfl.errors import ConfigError
from chillfl.extras import need

DATA_DIR_FIELD = "data_dir"


class RawSplit(NamedTuple):
    """Unnormalised arrays of a dataset's fixed train/test split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int


def _find_dir(data_dir: Path, folders: tuple[str, ...], marker: tuple[str, ...], what: str, url: str, expected: str) -> Path:
    """First of ``data_dir/folder`` (then ``data_dir``) holding one of the ``marker`` files."""
    for base in [data_dir / f for f in folders] + [data_dir]:
        if any((base / m).is_file() for m in marker):
            return base
    raise ConfigError(
        DATA_DIR_FIELD,
        f"{what} not found at {data_dir / folders[0]}; expected {expected}; download from {url}",
    )


def _need(path: Path, what: str, url: str) -> Path:
    if not path.is_file():
        raise ConfigError(DATA_DIR_FIELD, f"{what} file not found at {path}; download from {url}")
    return path


def _corrupt(path: Path, why: object) -> ConfigError:
    return ConfigError(DATA_DIR_FIELD, f"cannot read {path}: corrupt or wrong format ({why})")


# ---------------------------------------------------------------- CIFAR

CIFAR10_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR100_URL = "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"


def _numpy_globals() -> dict[tuple[str, str], Any]:
    """The globals a CIFAR batch refers to, under numpy 1 and numpy 2 module names."""
    try:
        from numpy._core import multiarray, numeric  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]
    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("_codecs", "encode"): _latin1_bytes,  # how Python 3 writes bytes at protocols 0-2
    }
    for module in ("numpy.core", "numpy._core"):
        allowed[(f"{module}.multiarray", "_reconstruct")] = multiarray._reconstruct
        allowed[(f"{module}.numeric", "_frombuffer")] = numeric._frombuffer  # type: ignore[attr-defined]  # protocol-5 pickles
    return allowed


def _latin1_bytes(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as Python 3 pickles bytes at protocols 0-2 (latin-1 only; other codecs refused)."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"refusing _codecs.encode with {encoding!r}")
    return text.encode("latin1")


class CifarUnpickler(pickle.Unpickler):
    """Unpickles CIFAR's python batches (dicts of bytes, lists of ints/bytes, numpy arrays) and nothing else.

    ``pickle.load`` calls whatever a file names (``os.system`` included), so a
    crafted ``data_batch_1`` under ``data_dir`` would run code. ``find_class`` here
    resolves only an explicit table of numpy names, never by import; anything
    else raises :class:`pickle.UnpicklingError` (reported as a ConfigError naming
    the file). Object arrays are refused too: their items would be unpickled
    through the same table, but the format never has them.
    """

    ALLOWED = _numpy_globals()

    def find_class(self, module: str, name: str) -> Any:
        found = self.ALLOWED.get((module, name))
        if found is None:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: not part of the CIFAR format")
        return found


def load_cifar_batch(path: Path) -> Any:
    """One CIFAR batch file through :class:`CifarUnpickler` (py2 ``str`` keys come back as ``bytes``)."""
    with open(path, "rb") as f:
        return CifarUnpickler(f, encoding="bytes").load()


def _read_pickle(path: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    try:
        batch = load_cifar_batch(path)
        if not isinstance(batch, dict):
            raise TypeError(f"expected a dict, got {type(batch).__name__}")
        raw, raw_labels = batch[b"data"], batch[label_key]
        if isinstance(raw, np.ndarray) and raw.dtype.hasobject:
            raise TypeError("object arrays are not part of the format")
        data = np.asarray(raw, dtype=np.uint8)
        labels = np.asarray(raw_labels, dtype=np.int64)
        images = data.reshape(len(data), 3, 32, 32)
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError, MemoryError) as exc:
        raise _corrupt(path, exc) from exc
    if len(labels) != len(images):
        raise _corrupt(path, f"{len(images)} images but {len(labels)} labels")
    return images, labels


@dataclass(frozen=True)
class NoOptions:
    """A dataset without options."""


def load_cifar10(data_dir: Path, opts: NoOptions) -> RawSplit:
    files = [f"data_batch_{i}" for i in range(1, 6)]
    expected = ", ".join(files + ["test_batch"])
    root = _find_dir(data_dir, ("cifar-10-batches-py",), ("data_batch_1",), "CIFAR-10", CIFAR10_URL, expected)
    parts = [_read_pickle(_need(root / f, "CIFAR-10", CIFAR10_URL), b"labels") for f in files]
    x_test, y_test = _read_pickle(_need(root / "test_batch", "CIFAR-10", CIFAR10_URL), b"labels")
    return RawSplit(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), x_test, y_test, 10)


@dataclass(frozen=True)
class Cifar100Options:
    """``labels``: "fine" (100 classes) or "coarse" (20 superclasses)."""

    labels: Literal["fine", "coarse"] = "fine"


def load_cifar100(data_dir: Path, opts: Cifar100Options) -> RawSplit:
    root = _find_dir(data_dir, ("cifar-100-python",), ("train",), "CIFAR-100", CIFAR100_URL, "train, test")
    key = b"fine_labels" if opts.labels == "fine" else b"coarse_labels"
    x_train, y_train = _read_pickle(root / "train", key)
    x_test, y_test = _read_pickle(_need(root / "test", "CIFAR-100", CIFAR100_URL), key)
    return RawSplit(x_train, y_train, x_test, y_test, 100 if opts.labels == "fine" else 20)


# ---------------------------------------------------------------- SVHN

SVHN_URL = "http://ufldl.stanford.edu/housenumbers/"


def _read_svhn(path: Path) -> tuple[np.ndarray, np.ndarray]:
    scipy_io = need("scipy.io", "datasets", "SVHN files")
    loadmat, MatReadError = scipy_io.loadmat, scipy_io.matlab.MatReadError

    try:
        mat: dict[str, Any] = loadmat(str(path))
        x = np.asarray(mat["X"], dtype=np.uint8)  # 32 x 32 x 3 x N
        y = np.asarray(mat["y"], dtype=np.int64).reshape(-1)
        if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != len(y):
            raise ValueError(f"X has shape {x.shape}, y has {len(y)} labels")
    except (KeyError, ValueError, TypeError, IndexError, OSError, MatReadError) as exc:
        raise _corrupt(path, exc) from exc
    y = np.where(y == 10, 0, y)  # SVHN stores digit 0 as label 10
    return np.ascontiguousarray(x.transpose(3, 2, 0, 1)), y


def load_svhn(data_dir: Path, opts: NoOptions) -> RawSplit:
    root = _find_dir(data_dir, ("svhn", "SVHN"), ("train_32x32.mat",), "SVHN", SVHN_URL, "train_32x32.mat, test_32x32.mat")
    x_train, y_train = _read_svhn(root / "train_32x32.mat")
    x_test, y_test = _read_svhn(_need(root / "test_32x32.mat", "SVHN", SVHN_URL))
    return RawSplit(x_train, y_train, x_test, y_test, 10)


# ---------------------------------------------------------------- MNIST / Fashion-MNIST (idx files)

MNIST_URL = "https://yann.lecun.com/exdb/mnist/"
FASHION_URL = "https://github.com/zalandoresearch/fashion-mnist"
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def read_idx(path: Path) -> np.ndarray:
    """Read an idx file (big-endian header: 0, 0, type 0x08 = ubyte, ndim, then ndim int32 sizes)."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            raw = f.read()
        if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
            raise ValueError("bad magic number (expected 0x0000 08 nd, unsigned bytes)")
        ndim = raw[3]
        dims = np.frombuffer(raw, dtype=">i4", count=ndim, offset=4)
        body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
        if body.size != int(np.prod(dims)):
            raise ValueError(f"header says {tuple(dims)} but {body.size} bytes follow")
    except (OSError, EOFError, ValueError, gzip.BadGzipFile) as exc:
        raise _corrupt(path, exc) from exc
    return body.reshape(tuple(int(d) for d in dims))


def _idx_file(root: Path, name: str) -> Path:
    return root / name if (root / name).is_file() else root / f"{name}.gz"


def _load_idx_set(data_dir: Path, folders: tuple[str, ...], what: str, url: str) -> RawSplit:
    marker = (IDX_FILES[0], IDX_FILES[0] + ".gz")
    root = _find_dir(data_dir, folders, marker, what, url, ", ".join(f"{f}[.gz]" for f in IDX_FILES))
    arrays = [read_idx(_need(_idx_file(root, f), what, url)) for f in IDX_FILES]
    x_train, y_train, x_test, y_test = arrays
    for x, y, f in ((x_train, y_train, IDX_FILES[0]), (x_test, y_test, IDX_FILES[2])):
        if x.ndim != 3 or y.ndim != 1 or len(x) != len(y):
            raise _corrupt(root / f, f"images {x.shape} do not match labels {y.shape}")
    return RawSplit(x_train[:, None], y_train.astype(np.int64), x_test[:, None], y_test.astype(np.int64), 10)


def load_mnist(data_dir: Path, opts: NoOptions) -> RawSplit:
    return _load_idx_set(data_dir, ("mnist", "MNIST/raw", "MNIST"), "MNIST", MNIST_URL)


def load_fashion_mnist(data_dir: Path, opts: NoOptions) -> RawSplit:
    folders = ("fashion_mnist", "fashion-mnist", "FashionMNIST/raw", "FashionMNIST")
    return _load_idx_set(data_dir, folders, "Fashion-MNIST", FASHION_URL)


# ---------------------------------------------------------------- UCI HAR

HAR_URL = "https://archive.ics.uci.edu/dataset/240/human+activity+recognition+using+smartphones"
HAR_SIGNALS = tuple(f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in "xyz")


def _read_har(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    channels = []
    for signal in HAR_SIGNALS:
        path = _need(root / split / "Inertial Signals" / f"{signal}_{split}.txt", "UCI HAR", HAR_URL)
        try:
            channels.append(np.loadtxt(path, dtype=np.float32, ndmin=2))
        except ValueError as exc:
            raise _corrupt(path, exc) from exc
    label_path = _need(root / split / f"y_{split}.txt", "UCI HAR", HAR_URL)
    try:
        y = np.loadtxt(label_path, dtype=np.int64, ndmin=1)
    except ValueError as exc:
        raise _corrupt(label_path, exc) from exc
    shapes = {c.shape for c in channels}
    if len(shapes) != 1 or channels[0].shape != (len(y), 128) or y.min() < 1 or y.max() > 6:
        raise _corrupt(root / split, f"signals {sorted(shapes)} with {len(y)} labels in 1..6 expected N x 128")
    return np.stack(channels, axis=1), y - 1


def load_uci_har(data_dir: Path, opts: NoOptions) -> RawSplit:
    marker = ("train/y_train.txt",)
    expected = "{train,test}/Inertial Signals/<9 signals>_{train,test}.txt and {train,test}/y_{train,test}.txt"
    root = _find_dir(data_dir, ("UCI HAR Dataset",), marker, "UCI HAR", HAR_URL, expected)
    x_train, y_train = _read_har(root, "train")
    x_test, y_test = _read_har(root, "test")
    return RawSplit(x_train, y_train, x_test, y_test, 6)

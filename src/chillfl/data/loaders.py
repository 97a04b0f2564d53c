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
  ``MNIST/raw`` / ``FashionMNIST/raw`` folders, plain or gzipped, and EMNIST's in
  NIST's ``emnist/gzip`` (gzipped) or torchvision's ``EMNIST/raw`` (gunzipped).
* MNIST and Fashion-MNIST share all four file names, so their files directly in
  ``data_dir`` are read only where ``data_dir`` says whose they are: its name
  (``mnist``, ``MNIST/raw``; ``fashion_mnist``, ``FashionMNIST/raw``, Zalando's
  ``data/fashion``), else the published 60,000-image train file's mean pixel
  (MNIST 0.13, Fashion-MNIST 0.29); otherwise one line refuses, never a guess.
* Only CIFAR-10's python version is read; its binary version
  (``cifar-10-batches-bin``) and MATLAB v7.3 (HDF5) SVHN files are refused in one line.
* CIFAR-100 uses the 100 fine labels by default (``labels = "coarse"`` for 20).
* No file executes code: the CIFAR pickles are read by :class:`CifarUnpickler`,
  which admits only the few numpy callables the format uses; SVHN ``.mat``
  files (scipy), idx files and HAR text files are parsed, never unpickled.

Checked against (2026-12): torchvision's readers (CIFAR keys, SVHN transpose and 10 -> 0, idx, EMNIST splits), LEAF's split_data.py, UCI-HAR's 9 x 128 layout; corrupt files fuzzed.
"""

from __future__ import annotations

import errno
import gzip
import math
import os
import pickle
import stat
import warnings
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np

from chillfl.data.sources import MANUAL, download_command, fetched_from
from chillfl.errors import ConfigError, DataAbsent, Unreachable, json_loads
from chillfl.extras import need

DATA_DIR_FIELD = "data_dir"


def data_absent(exc: ConfigError | Unreachable) -> bool:
    """Whether ``exc`` says the dataset's files are not here (a ``data_dir`` error, :class:`DataAbsent`, or a source
    that cannot be reached, :class:`Unreachable`): what a dry run reports as "names and options checked" instead of failing."""
    return exc.field == DATA_DIR_FIELD or isinstance(exc, (DataAbsent, Unreachable))


def files_absent(exc: ConfigError) -> bool:
    """Whether ``exc`` is the loader's line on ``data_dir`` (the dataset's files are not under it), narrower than
    :func:`data_absent`: not a hub that is offline (:class:`DataAbsent`) or cannot be reached. Why: a resume adds that the
    folder the run was started in has no ``data_dir`` either only where another folder could have held the files."""
    return exc.field == DATA_DIR_FIELD and not isinstance(exc, DataAbsent)


class RawSplit(NamedTuple):
    """Unnormalised arrays of a dataset's fixed train/test split."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int


def _fetch_hint(key: str, data_dir: Path, url: str, again: bool = False) -> str:
    """How to get dataset ``key``: the one command that fetches it (or LEAF's recipe), and its source.

    ``again``: its folder is there but lacks a file; ``--force`` replaces a folder the downloader did not finish
    (or one placed by hand), which it otherwise leaves alone."""
    if key in MANUAL:
        return MANUAL[key].for_dir(data_dir) + f" (source: {url})"
    if again:
        return f"fetch it again with: {download_command(key, str(data_dir))} --force (source: {url})"
    return f"fetch it with: {download_command(key, str(data_dir))} (source: {url})"


_IDX_MARKER = ("train-images-idx3-ubyte", "train-images-idx3-ubyte.gz")

ROOTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cifar10": (("cifar-10-batches-py",), ("data_batch_1",)),
    "cifar100": (("cifar-100-python",), ("train",)),
    "svhn": (("svhn", "SVHN"), ("train_32x32.mat",)),
    "mnist": (("mnist", "MNIST/raw", "MNIST"), _IDX_MARKER),
    "fashion_mnist": (("fashion_mnist", "fashion-mnist", "FashionMNIST/raw", "FashionMNIST"), _IDX_MARKER),
    "uci_har": (("UCI HAR Dataset",), ("train/y_train.txt",)),
    "emnist": (("emnist/gzip", "EMNIST/raw", "gzip"),
               tuple(f"emnist-{s}-train-images-idx3-ubyte{gz}" for s in ("byclass", "bymerge", "balanced", "letters", "digits", "mnist") for gz in (".gz", ""))),
    "tiny_imagenet": (("tiny-imagenet-200",), ("wnids.txt",)),
    "caltech256": (("256_ObjectCategories",), ("001.ak47/",)),
    "femnist": (("femnist", "femnist/data"), ("all_data/", "train/")),
}
"""Where each real dataset's loader looks under ``data_dir`` (these folders in order, then ``data_dir`` itself) and the
files that mark it there (a name ending in ``/``: a folder). One table for the loaders and ``chillfl data download``
(its listing, its check of what an archive unpacked): the listing had a rule of its own (the folder exists) and said
"missing" of a torchvision ``MNIST/raw`` the loader read, "present" of an empty folder it did not."""


def find_root(data_dir: Path, key: str, marker: tuple[str, ...] | None = None) -> Path | None:
    """The folder dataset ``key``'s loader reads under ``data_dir`` (:data:`ROOTS`), None where there is none;
    ``marker``: the files one option needs instead (EMNIST's split)."""
    folders, markers = ROOTS[key]
    for base in [data_dir / f for f in folders] + [data_dir]:
        if any(is_dir(base / m[:-1]) if m.endswith("/") else is_file(base / m) for m in marker or markers):
            return base
    return None


def read_where(key: str) -> str:
    """Where dataset ``key``'s loader first looks for its first marker, relative to ``data_dir`` (for messages)."""
    folders, markers = ROOTS[key]
    return f"{folders[0]}/{markers[0]}"


def _find_dir(data_dir: Path, key: str, what: str, url: str, expected: str, marker: tuple[str, ...] | None = None) -> Path:
    """:func:`find_root`, or one line on ``data_dir`` naming the folder, the files expected and how to fetch them."""
    root = find_root(data_dir, key, marker)
    if root is None:
        raise ConfigError(DATA_DIR_FIELD, f"{what} not found at {data_dir / ROOTS[key][0][0]}; expected {expected}; {_fetch_hint(key, data_dir, url)}")
    return root


def _need(path: Path, what: str, url: str, key: str, data_dir: Path) -> Path:
    """``path``, a file of dataset ``key`` in the folder :func:`_find_dir` found: missing, the folder is incomplete."""
    if not is_file(path):
        raise ConfigError(DATA_DIR_FIELD, f"{what} file not found at {path}; {_fetch_hint(key, data_dir, url, again=True)}")
    return path


def _corrupt(path: Path, why: object) -> ConfigError:
    """One line on ``data_dir`` for a data file that cannot be read. An ``OSError`` with an errno is the file system's
    refusal (permission denied, an I/O error), not the bytes': it is said as such, since "corrupt or wrong format"
    invited a re-download of a file that was fine (a data root copied with other permissions). An OSError without one
    (gzip's BadGzipFile, PIL's unidentified image) is a format error."""
    if isinstance(why, OSError) and why.errno is not None:
        said = why.strerror or str(why)
        return ConfigError(DATA_DIR_FIELD, f"cannot read {path}: {said[:1].lower()}{said[1:]}")
    reason = str(why) or type(why).__name__  # MemoryError (a size field of 2**62 bytes) says nothing of itself
    return ConfigError(DATA_DIR_FIELD, f"cannot read {path}: corrupt or wrong format ({reason})")


def _listing(folder: Path, pattern: str = "*") -> list[Path]:
    """``folder``'s entries whose names match ``pattern`` (as ``folder.glob(pattern)`` matches them), sorted; a folder that
    cannot be listed (permission denied) is one line on ``data_dir`` (:func:`_corrupt`). Not ``glob`` itself: it returns
    nothing for an unreadable folder, so the user was told a class "has no images" and went looking for missing files;
    nor a bare ``iterdir``: its PermissionError was a traceback."""
    try:
        return sorted(p for p in folder.iterdir() if p.match(pattern))
    except OSError as exc:
        raise _corrupt(folder, exc) from None


ABSENT = (errno.ENOENT, errno.ENOTDIR)
"""What a lookup of a path that is not there fails with: every other ``OSError`` is the file system refusing it."""


def _kind(path: Path) -> int | None:
    """``path``'s ``st_mode`` (None: not there); a lookup the file system refuses is one line on ``data_dir``.

    Why not ``Path.is_dir``: it re-raises EACCES (a folder of mode 000 above the path), a traceback, where Python's
    later ``os.path.isdir`` would answer False and the user would be told the data is missing."""
    try:
        return path.stat().st_mode
    except OSError as exc:
        if exc.errno in ABSENT:
            return None
        raise _corrupt(path, exc) from None


def is_dir(path: Path) -> bool:
    """Whether ``path`` is a folder (following links), a refused lookup one line on ``data_dir`` (:func:`_kind`)."""
    mode = _kind(path)
    return mode is not None and stat.S_ISDIR(mode)


def is_file(path: Path) -> bool:
    """Whether ``path`` is a file (following links), a refused lookup one line on ``data_dir`` (:func:`_kind`)."""
    mode = _kind(path)
    return mode is not None and stat.S_ISREG(mode)


def tree_files(root: Path, suffix: str) -> list[Path]:
    """Every file under ``root`` whose name ends in ``suffix``, sorted; a folder that cannot be listed is one line on
    ``data_dir`` (:func:`_corrupt`). Not ``rglob``: it skips a folder it cannot list, so an unreadable folder of a
    dataset read as "no files" there."""

    def refused(exc: OSError) -> None:
        if exc.errno in ABSENT:  # gone (or never there): nothing under it, as rglob says
            return
        raise _corrupt(Path(exc.filename) if exc.filename else root, exc) from None

    found = [Path(top) / name for top, _, names in os.walk(root, onerror=refused, followlinks=True) for name in names if name.endswith(suffix)]
    return sorted(found)


def local_source(path: str, data_dir: Path) -> Path | None:
    """The local file or folder ``path`` names (under ``data_dir`` first, else from the current folder), or None: where
    the hub datasets' loaders read (:mod:`chillfl.data.leaf_hub`) and ``chillfl data download``'s listing looks."""
    p = Path(path).expanduser()
    for candidate in ([p] if p.is_absolute() else [data_dir / p, p]):
        if candidate.exists():
            return candidate
    return None


def table_files(root: Path) -> list[Path]:
    """The files a hub dataset's loader (``flwr_femnist``, ``flwr_shakespeare``) reads from its local source ``root``:
    ``root`` itself when it is a file, else the ``.parquet`` files under it (none: the ``.csv`` ones), hidden folders
    (``hf download``'s ``.cache/``) skipped. Here, not in :mod:`chillfl.data.leaf_hub` (which imports torch), so that
    ``chillfl data download``'s listing asks the loader's question: it said "present" of any folder of that name."""
    if is_file(root):
        return [root]
    files = tree_files(root, ".parquet") or tree_files(root, ".csv")
    return [f for f in files if not any(part.startswith(".") for part in f.relative_to(root).parts)]


def _integers(values: Any, what: str, low: int | None = None, high: int | None = None) -> np.ndarray:
    """``values`` as an integer array, refused (ValueError) unless they are integers within [low, high].

    A plain ``astype`` would wrap 300 or -5 into a pixel and truncate 1.5 into a label: a wrong dataset, silently.
    """
    a = np.asarray(values)
    if a.size and a.dtype.kind == "f" and np.array_equal(a, np.round(a)):
        a = a.astype(np.int64)  # whole numbers stored as floats (MATLAB's double)
    if a.size and a.dtype.kind not in "iu":
        raise ValueError(f"{what} must be integers, got dtype {a.dtype}")
    if a.size and ((low is not None and a.min() < low) or (high is not None and a.max() > high)):
        raise ValueError(f"{what} must be in [{low}, {high}], got {a.min()}..{a.max()}")
    return a


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
        ("__builtin__", "bytes"): _empty_bytes,  # ... and b"" (its protocol-2 name; a batch_label or an empty split)
        ("builtins", "bytes"): _empty_bytes,
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


def _empty_bytes(*args: object) -> bytes:
    """``bytes()`` as Python 3 pickles ``b""`` at protocols 0-2 (``__builtin__.bytes`` called with no argument); any argument
    is refused, since ``bytes(n)`` would allocate what the file asks and nothing else of the format calls it."""
    if args:
        raise pickle.UnpicklingError("refusing bytes(...) with arguments: not part of the CIFAR format")
    return b""


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


def _batch_value(batch: dict[Any, Any], key: bytes) -> Any:
    """``batch[key]``, or under its ``str`` name (a batch loaded with ``encoding="latin1"``, as torchvision does, and pickled
    again has ``str`` keys); missing, one line that says which key and which keys are there (KeyError's "(b'data')" did not)."""
    for k in (key, key.decode("latin1")):
        if k in batch:
            return batch[k]
    keys = ", ".join(sorted(repr(k) for k in batch)[:8])
    raise ValueError(f"no key {key!r} (keys: {keys or 'none'})")


def _read_pickle(path: Path, label_key: bytes, classes: int) -> tuple[np.ndarray, np.ndarray]:
    try:
        batch = load_cifar_batch(path)
        if not isinstance(batch, dict):
            raise TypeError(f"expected a dict, got {type(batch).__name__}")
        raw, raw_labels = _batch_value(batch, b"data"), _batch_value(batch, label_key)
        if isinstance(raw, np.ndarray) and raw.dtype.hasobject:
            raise TypeError("object arrays are not part of the format")
        data = _integers(raw, "pixels", 0, 255).astype(np.uint8)
        labels = _integers(raw_labels, "labels").astype(np.int64)
        images = data.reshape(len(data), 3, 32, 32)
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError, IndexError, AttributeError, OverflowError, MemoryError, OSError) as exc:
        raise _corrupt(path, exc) from exc  # OSError: a batch that cannot be opened (permission denied) was a traceback
    if labels.ndim != 1 or data.ndim != 2:  # nested-list labels ([[3], [9]]) passed, then failed in training or concatenate
        raise _corrupt(path, f"labels of shape {labels.shape} and data of shape {data.shape} (expected one label per row of pixels)")
    if len(labels) != len(images):
        raise _corrupt(path, f"{len(images)} images but {len(labels)} labels")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise _corrupt(path, f"{label_key.decode()}: labels outside 0..{classes - 1} (got {labels.min()}..{labels.max()})")
    return images, labels


@dataclass(frozen=True)
class NoOptions:
    """A dataset without options."""


CIFAR10_BINARY = "cifar-10-batches-bin"


def _refuse_cifar10_binary(data_dir: Path) -> None:
    """CIFAR-10's binary version (``cifar-10-batches-bin/data_batch_1.bin``) where the python version is not: one line saying so.

    Why: "not found; fetch it" sent the user to download what they had, without saying that only the python version is read."""
    if any(is_file(base / "data_batch_1") for base in (data_dir / "cifar-10-batches-py", data_dir)):
        return
    for base in (data_dir / CIFAR10_BINARY, data_dir):
        if is_file(base / "data_batch_1.bin"):
            raise ConfigError(DATA_DIR_FIELD, f"{base} holds CIFAR-10's binary version (data_batch_1.bin ...), which is not read: use its python version "
                                              f"(cifar-10-python.tar.gz, unpacked as {data_dir / 'cifar-10-batches-py'}); {_fetch_hint('cifar10', data_dir, CIFAR10_URL)}")


def load_cifar10(data_dir: Path, opts: NoOptions) -> RawSplit:
    files = [f"data_batch_{i}" for i in range(1, 6)]
    expected = ", ".join(files + ["test_batch"])
    _refuse_cifar10_binary(data_dir)
    root = _find_dir(data_dir, "cifar10", "CIFAR-10", CIFAR10_URL, expected)
    parts = [_read_pickle(_need(root / f, "CIFAR-10", CIFAR10_URL, "cifar10", data_dir), b"labels", 10) for f in files]
    x_test, y_test = _read_pickle(_need(root / "test_batch", "CIFAR-10", CIFAR10_URL, "cifar10", data_dir), b"labels", 10)
    return RawSplit(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), x_test, y_test, 10)


@dataclass(frozen=True)
class Cifar100Options:
    """``labels``: "fine" (100 classes) or "coarse" (20 superclasses)."""

    labels: Literal["fine", "coarse"] = "fine"


def load_cifar100(data_dir: Path, opts: Cifar100Options) -> RawSplit:
    root = _find_dir(data_dir, "cifar100", "CIFAR-100", CIFAR100_URL, "train, test")
    key = b"fine_labels" if opts.labels == "fine" else b"coarse_labels"
    classes = 100 if opts.labels == "fine" else 20
    x_train, y_train = _read_pickle(root / "train", key, classes)
    x_test, y_test = _read_pickle(_need(root / "test", "CIFAR-100", CIFAR100_URL, "cifar100", data_dir), key, classes)
    return RawSplit(x_train, y_train, x_test, y_test, classes)


# ---------------------------------------------------------------- SVHN

SVHN_URL = "http://ufldl.stanford.edu/housenumbers/"


def _read_svhn(path: Path) -> tuple[np.ndarray, np.ndarray]:
    scipy_io = need("scipy.io", "datasets", "SVHN files")
    loadmat, MatReadError = scipy_io.loadmat, scipy_io.matlab.MatReadError

    try:
        mat: dict[str, Any] = loadmat(str(path))
        x = _integers(mat["X"], "pixels", 0, 255).astype(np.uint8)  # 32 x 32 x 3 x N
        y = _integers(mat["y"], "labels").astype(np.int64).reshape(-1)
        if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or x.shape[3] != len(y):
            raise ValueError(f"X has shape {x.shape}, y has {len(y)} labels")
        if y.size and (y.min() < 0 or y.max() > 10):  # 1..10 (10 is digit 0); a 0 some re-saves write is digit 0 too
            raise ValueError(f"labels outside 1..10, SVHN's range (got {y.min()}..{y.max()})")
    except NotImplementedError:  # scipy's answer to a MATLAB v7.3 file (HDF5 inside): a traceback before
        raise _corrupt(path, "a MATLAB v7.3 (HDF5) .mat file, which is not read; SVHN's own files are v5: fetch them again") from None
    except (KeyError, ValueError, TypeError, IndexError, OSError, MatReadError, zlib.error) as exc:  # zlib.error: a damaged compressed v5 file
        raise _corrupt(path, exc) from exc
    y = np.where(y == 10, 0, y)  # SVHN stores digit 0 as label 10
    return np.ascontiguousarray(x.transpose(3, 2, 0, 1)), y


def load_svhn(data_dir: Path, opts: NoOptions) -> RawSplit:
    root = _find_dir(data_dir, "svhn", "SVHN", SVHN_URL, "train_32x32.mat, test_32x32.mat")
    x_train, y_train = _read_svhn(root / "train_32x32.mat")
    x_test, y_test = _read_svhn(_need(root / "test_32x32.mat", "SVHN", SVHN_URL, "svhn", data_dir))
    return RawSplit(x_train, y_train, x_test, y_test, 10)


# ---------------------------------------------------------------- MNIST / Fashion-MNIST (idx files)

MNIST_URL = fetched_from("mnist")  # the downloader's mirror first, then LeCun's site
FASHION_URL = "https://github.com/zalandoresearch/fashion-mnist"
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
IDX_IMAGE = (28, 28)
"""The image size of every idx dataset here (MNIST, Fashion-MNIST, EMNIST): any other loaded silently into models built for it."""


def _check_idx_pair(x: np.ndarray, y: np.ndarray, path: Path, what: str, labels: Path, classes: int, first: int = 0) -> None:
    """Images ``x`` (N x 28 x 28, file ``path``) and labels ``y`` (N in ``first``..``first + classes - 1``, file ``labels``) of one
    split, else one ConfigError on ``data_dir`` naming the file at fault (both where their counts differ)."""
    if y.ndim != 1:
        raise _corrupt(labels, f"labels of shape {y.shape}, expected one dimension")
    if x.ndim != 3 or len(x) != len(y):
        raise _corrupt(path, f"images {x.shape} do not match labels {y.shape} of {labels.name}")
    if x.shape[1:] != IDX_IMAGE:
        raise _corrupt(path, f"images are {x.shape[1]}x{x.shape[2]}, {what}'s are {IDX_IMAGE[0]}x{IDX_IMAGE[1]}")
    if y.size and (y.min() < first or y.max() > first + classes - 1):
        raise _corrupt(labels, f"labels outside {first}..{first + classes - 1}, {what}'s range (got {y.min()}..{y.max()})")


def read_idx(path: Path) -> np.ndarray:
    """Read an idx file (big-endian header: 0, 0, type 0x08 = ubyte, ndim, then ndim int32 sizes)."""
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:
            raw = f.read()
        if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
            raise ValueError("bad magic number (expected 0x0000 08 nd, unsigned bytes)")
        ndim = raw[3]
        dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">i4", count=ndim, offset=4))
        body = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
        # Python ints: numpy's product of (65536,) * 4 wrapped to 0, and a negative size times 0 is 0 too; either matched
        # an empty body, and the reshape below failed outside this try (a traceback)
        if any(d < 0 for d in dims) or body.size != math.prod(dims):
            raise ValueError(f"header says {dims} but {body.size} bytes follow")
        return body.reshape(dims)
    except (OSError, EOFError, ValueError, zlib.error) as exc:  # zlib.error: a damaged deflate stream, not an OSError
        raise _corrupt(path, exc) from exc


def _gz_first(root: Path, name: str) -> Path:
    """``root/name.gz`` where it is there, else ``root/name`` (EMNIST: NIST ships gzipped files, torchvision gunzips them)."""
    return root / f"{name}.gz" if is_file(root / f"{name}.gz") else root / name


class IdxSet(NamedTuple):
    """One of the two idx datasets that share all four file names (MNIST, Fashion-MNIST): what tells its files apart."""

    key: str
    what: str
    url: str
    names: tuple[str, ...]
    """Folder names that say a flat folder (``data_dir`` itself, or ``<name>/raw``) is this set's, compared by :func:`_plain_name`."""
    train_mean: float
    """Mean train pixel (0..255) of the published 60,000-image train file: MNIST 33.3 (0.1307), Fashion-MNIST 72.9 (0.2860)."""


MNIST_SET = IdxSet("mnist", "MNIST", MNIST_URL, ("mnist",), 0.1307 * 255)  # its folders: ROOTS
FASHION_SET = IdxSet("fashion_mnist", "Fashion-MNIST", FASHION_URL, ("fashionmnist", "fashion"), 0.2860 * 255)  # "fashion": Zalando's repository keeps them in data/fashion/
IDX_SETS = (MNIST_SET, FASHION_SET)
IDX_PUBLISHED = (60_000, 10_000)
"""Train and test images of both published sets: only files of these sizes are told apart by their pixels."""


IDX_MEAN_TOLERANCE = 3.0
"""How far (0..255) a full-size set's mean train pixel may be from a published set's and still be told as that set's
(MNIST 33.3 and Fashion-MNIST 72.9 are 40 apart; another set of the same sizes, KMNIST about 49, is neither's)."""


def _plain_name(folder: Path) -> str:
    """``folder``'s name for :attr:`IdxSet.names` (lower case, no ``-`` or ``_``); torchvision's ``raw`` is named by its parent.
    Taken from the absolute path: ``data_dir = "."`` (run inside ``mnist/``) has no name of its own."""
    folder = Path(os.path.abspath(folder))
    name = folder.name if folder.name.lower() != "raw" else folder.parent.name
    return name.lower().replace("-", "").replace("_", "")


def named_idx_set(folder: Path) -> IdxSet | None:
    """The set whose files the flat folder ``folder`` holds by its name (:attr:`IdxSet.names`); None: its name says neither."""
    return next((s for s in IDX_SETS if _plain_name(folder) in s.names), None)


def idx_count(path: Path) -> int | None:
    """The first size (images, labels) an idx file's header gives, read from its first 8 bytes; None: no idx header.
    Why: ``chillfl data download``'s listing tells a flat folder's set apart as the loader does (name, then published
    sizes) without reading 47 MB of pixels."""
    try:
        with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
            head = f.read(8)
    except (OSError, EOFError, zlib.error):
        return None
    if len(head) < 8 or head[:3] != b"\x00\x00\x08" or head[3] == 0:
        return None
    return int.from_bytes(head[4:8], "big", signed=True)


def idx_file(root: Path, name: str) -> Path:
    """``root/name``, plain where it is there, else gzipped: the file the MNIST and Fashion-MNIST loaders read."""
    return root / name if is_file(root / name) else root / f"{name}.gz"


def _idx_owner(root: Path, x_train: np.ndarray, x_test: np.ndarray) -> IdxSet | None:
    """Which set the files in the flat folder ``root`` are: its name's, else the published files' mean pixel; None: cannot tell."""
    named = named_idx_set(root)
    if named is not None:
        return named
    if (len(x_train), len(x_test)) != IDX_PUBLISHED:
        return None
    mean = float(x_train.mean(dtype=np.float64))
    nearest = min(IDX_SETS, key=lambda s: abs(s.train_mean - mean))
    return nearest if abs(nearest.train_mean - mean) <= IDX_MEAN_TOLERANCE else None  # KMNIST's ~49 is neither's: not a guess


def _load_idx_set(data_dir: Path, spec: IdxSet) -> RawSplit:
    what, url, key = spec.what, spec.url, spec.key
    root = _find_dir(data_dir, key, what, url, ", ".join(f"{f}[.gz]" for f in IDX_FILES))
    arrays = [read_idx(_need(idx_file(root, f), what, url, key, data_dir)) for f in IDX_FILES]
    x_train, y_train, x_test, y_test = arrays
    for x, y, images, labels in ((x_train, y_train, IDX_FILES[0], IDX_FILES[1]), (x_test, y_test, IDX_FILES[2], IDX_FILES[3])):
        _check_idx_pair(x, y, idx_file(root, images), what, idx_file(root, labels), 10)
    if root == data_dir:  # a flat folder: MNIST's and Fashion-MNIST's files share every name, so it must say whose they are
        owner = _idx_owner(root, x_train, x_test)
        if owner is None:
            raise ConfigError(DATA_DIR_FIELD, f"cannot tell whether the idx files directly in {data_dir} are MNIST's or Fashion-MNIST's (they share "
                                              f"file names): put them in {data_dir / ROOTS[key][0][0]}, or point data_dir at the folder above it")
        if owner is not spec:
            raise ConfigError(DATA_DIR_FIELD, f"the idx files directly in {data_dir} are {owner.what}'s, not {what}'s "
                                              f"({'by the folder name' if _plain_name(root) in owner.names else 'by their pixels'}); "
                                              f"{what} not found at {data_dir / ROOTS[key][0][0]}; {_fetch_hint(key, data_dir, url)}")
    return RawSplit(x_train[:, None], y_train.astype(np.int64), x_test[:, None], y_test.astype(np.int64), 10)


def load_mnist(data_dir: Path, opts: NoOptions) -> RawSplit:
    return _load_idx_set(data_dir, MNIST_SET)


def load_fashion_mnist(data_dir: Path, opts: NoOptions) -> RawSplit:
    return _load_idx_set(data_dir, FASHION_SET)


# ---------------------------------------------------------------- UCI HAR

HAR_URL = "https://archive.ics.uci.edu/dataset/240/human+activity+recognition+using+smartphones"
HAR_SIGNALS = tuple(f"{kind}_{axis}" for kind in ("body_acc", "body_gyro", "total_acc") for axis in "xyz")


def _read_har(root: Path, split: str, data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    def read(path: Path, dtype: type, ndmin: Literal[1, 2]) -> np.ndarray:
        try:
            with warnings.catch_warnings():  # an empty file: refused below in one line, without numpy's warning first
                warnings.filterwarnings("ignore", "loadtxt: input contained no data", UserWarning)
                return np.loadtxt(path, dtype=dtype, ndmin=ndmin)
        except (ValueError, OSError) as exc:  # OSError: a file that cannot be opened (permission denied) was a traceback
            raise _corrupt(path, exc) from exc

    channels = [read(_need(root / split / "Inertial Signals" / f"{s}_{split}.txt", "UCI HAR", HAR_URL, "uci_har", data_dir), np.float32, 2) for s in HAR_SIGNALS]
    y = read(_need(root / split / f"y_{split}.txt", "UCI HAR", HAR_URL, "uci_har", data_dir), np.int64, 1)
    shapes = {c.shape for c in channels}
    if len(shapes) != 1 or channels[0].shape != (len(y), 128) or y.min() < 1 or y.max() > 6:
        raise _corrupt(root / split, f"signals {sorted(shapes)} with {len(y)} labels in 1..6 expected N x 128")
    return np.stack(channels, axis=1), y - 1


def load_uci_har(data_dir: Path, opts: NoOptions) -> RawSplit:
    expected = "{train,test}/Inertial Signals/<9 signals>_{train,test}.txt and {train,test}/y_{train,test}.txt"
    root = _find_dir(data_dir, "uci_har", "UCI HAR", HAR_URL, expected)
    x_train, y_train = _read_har(root, "train", data_dir)
    x_test, y_test = _read_har(root, "test", data_dir)
    return RawSplit(x_train, y_train, x_test, y_test, 6)


# ---------------------------------------------------------------- EMNIST (idx files from NIST's gzip.zip)

EMNIST_URL = "https://www.nist.gov/itl/products-and-services/emnist-dataset"
EMNIST_CLASSES = {"byclass": 62, "bymerge": 47, "balanced": 47, "letters": 26, "digits": 10, "mnist": 10}


@dataclass(frozen=True)
class EmnistOptions:
    """``split``: one of NIST's six EMNIST splits (byclass 62 classes, bymerge/balanced 47, letters 26, digits/mnist 10)."""

    split: Literal["byclass", "bymerge", "balanced", "letters", "digits", "mnist"] = "byclass"


def load_emnist(data_dir: Path, opts: EmnistOptions) -> RawSplit:
    names = [f"emnist-{opts.split}-{part}-ubyte" for part in ("train-images-idx3", "train-labels-idx1", "test-images-idx3", "test-labels-idx1")]
    # NIST's gzip.zip holds them gzipped (emnist/gzip); torchvision's EMNIST/raw holds them gunzipped
    marker = (names[0] + ".gz", names[0])
    root = _find_dir(data_dir, "emnist", "EMNIST", EMNIST_URL, ", ".join(f"{n}[.gz]" for n in names), marker)
    paths = [_gz_first(root, n) for n in names]
    x_train, y_train, x_test, y_test = (read_idx(_need(p, "EMNIST", EMNIST_URL, "emnist", data_dir)) for p in paths)
    offset = 1 if opts.split == "letters" else 0  # letters are labelled 1..26
    out = []
    for x, y, images, labels in ((x_train, y_train, paths[0], paths[1]), (x_test, y_test, paths[2], paths[3])):
        _check_idx_pair(x, y, images, "EMNIST", labels, EMNIST_CLASSES[opts.split], offset)
        out += [np.ascontiguousarray(x.transpose(0, 2, 1))[:, None], y.astype(np.int64) - offset]  # NIST stores images transposed
    return RawSplit(out[0], out[1], out[2], out[3], EMNIST_CLASSES[opts.split])


# ---------------------------------------------------------------- images decoded with Pillow


def _pil() -> Any:
    return need("PIL.Image", "images", "JPEG datasets")  # one MissingExtra line naming the `images` extra


REFUSED_FORMATS = ("EPS",)
"""The one Pillow format no dataset image is opened as: Pillow hands EPS to Ghostscript, which runs the file's
PostScript program, so opening a data file would run the data file's code. Every other format Pillow registers is
decoded by Pillow itself (a few, GRIB, BUFR, HDF5, only with a handler the user installs, else an unreadable image)."""


def image_formats(image: Any) -> tuple[str, ...]:
    """Every format the Pillow ``image`` module (``PIL.Image``) registers, after ``Image.init()`` (which imports its
    plugins), but :data:`REFUSED_FORMATS`, in Pillow's own order. Why a list at all: left to itself Pillow picks the format
    from the bytes, and a ``.jpg`` file or an image cell holding EPS is handed to Ghostscript. Why not a short list of
    the formats datasets "use": ``datasets.Image`` keeps any format Pillow both opens and saves (AVIF, JPEG 2000, TGA,
    ...), imagefolder stores a file's own bytes, and a real Caltech-256 file need not be a JPEG: such images loaded
    with ``datasets`` and must load here."""
    image.init()
    return tuple(f for f in image.ID if f not in REFUSED_FORMATS)


def _decode(path: Path, size: int, crop: bool) -> np.ndarray:
    """One image as 3 x size x size uint8 (RGB; ``crop``: centre square crop before resizing); a file in no format of
    :func:`image_formats` (EPS among them) is one line naming it, as a corrupt one is."""
    image_mod = _pil()
    try:
        with image_mod.open(path, formats=image_formats(image_mod)) as im:
            im = im.convert("RGB")
            if crop and im.width != im.height:
                side = min(im.width, im.height)
                left, top = (im.width - side) // 2, (im.height - side) // 2
                im = im.crop((left, top, left + side, top + side))
            if im.size != (size, size):
                im = im.resize((size, size), image_mod.Resampling.BILINEAR)
            return np.asarray(im, dtype=np.uint8).transpose(2, 0, 1)
    except image_mod.UnidentifiedImageError as exc:  # its text repeats the path and not what was wrong
        raise _corrupt(path, "not an image format Pillow decodes, EPS refused") from exc
    except (OSError, ValueError, SyntaxError, EOFError, RuntimeError, image_mod.DecompressionBombError) as exc:  # PIL's errors for unreadable or absurd images (RuntimeError: a damaged AVIF)
        raise _corrupt(path, exc) from exc


def _decode_all(paths: list[Path], size: int, crop: bool) -> np.ndarray:
    """All images, decoded on a thread per core (Pillow releases the GIL); image i goes to row i whatever the order."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    out = np.empty((len(paths), 3, size, size), dtype=np.uint8)

    def one(i: int) -> None:
        out[i] = _decode(paths[i], size, crop)

    with ThreadPoolExecutor(max_workers=max(1, min(16, os.cpu_count() or 1))) as pool:
        for _ in pool.map(one, range(len(paths))):  # iterating re-raises a worker's error
            pass
    return out


# ---------------------------------------------------------------- Tiny-ImageNet

TINY_URL = "http://cs231n.stanford.edu/tiny-imagenet-200.zip"


@dataclass(frozen=True)
class TinyImagenetOptions:
    """``size``: side in pixels (64 = the files' own size; other sizes are resized once, then cached)."""

    size: int = 64

    def validate(self, section: str) -> None:
        if not 8 <= self.size <= 512:
            raise ConfigError(f"{section}.size", f"must be in [8, 512], got {self.size}")


def tiny_imagenet_root(data_dir: Path) -> Path:
    return _find_dir(data_dir, "tiny_imagenet", "Tiny-ImageNet", TINY_URL, "wnids.txt, train/<wnid>/images/*.JPEG, val/val_annotations.txt")


TINY_IMAGENET_OUTPUT = 1
"""Output version of the Tiny-ImageNet loader, in its cache key (:mod:`chillfl.data.arraycache`): bump it when what it produces changes."""


def load_tiny_imagenet(data_dir: Path, opts: TinyImagenetOptions) -> RawSplit:
    """Train: ``train/<wnid>/images/*.JPEG``; test: the labelled ``val`` split (``val_annotations.txt``: file, wnid, box).

    Classes are the sorted wnids of ``wnids.txt``; the unlabelled ``test`` folder is not used.
    """
    root = tiny_imagenet_root(data_dir)
    listed = [w.strip() for w in _text(root / "wnids.txt").split() if w.strip()]
    wnids = sorted(set(listed))
    if not wnids or len(wnids) != len(listed):  # a class listed twice would load its images twice, under two labels
        raise _corrupt(root / "wnids.txt", f"{len(listed)} wnids, {len(wnids)} distinct; expected one wnid per line, each once")
    index = {w: i for i, w in enumerate(wnids)}
    train_paths: list[Path] = []
    train_labels: list[int] = []
    for w in wnids:
        images = root / "train" / w / "images"
        files = _listing(images, "*.JPEG") if is_dir(images) else []
        if not files:
            raise ConfigError(DATA_DIR_FIELD, f"Tiny-ImageNet class {w} has no images in {root / 'train' / w / 'images'}")
        train_paths += files
        train_labels += [index[w]] * len(files)
    annotations = _need(root / "val" / "val_annotations.txt", "Tiny-ImageNet", TINY_URL, "tiny_imagenet", data_dir)
    test_paths: list[Path] = []
    test_labels: list[int] = []
    for number, line in enumerate(_text(annotations).splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in index or not _inside_name(fields[0]):
            raise _corrupt(annotations, f"line {number}: expected '<file>\\t<wnid from wnids.txt>...'")
        test_paths.append(_need(root / "val" / "images" / fields[0], "Tiny-ImageNet", TINY_URL, "tiny_imagenet", data_dir))
        test_labels.append(index[fields[1]])
    x_train = _decode_all(train_paths, opts.size, crop=False)
    x_test = _decode_all(test_paths, opts.size, crop=False)
    return RawSplit(x_train, np.array(train_labels, dtype=np.int64), x_test, np.array(test_labels, dtype=np.int64), len(wnids))


def _text(path: Path) -> str:
    """A text file of the dataset (UTF-8); bytes that are not text are the file's fault: one line naming it."""
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError) as exc:  # OSError: one that cannot be opened (permission denied)
        raise _corrupt(path, exc) from None


def _inside_name(name: str) -> bool:
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..")


# ---------------------------------------------------------------- Caltech-256

CALTECH_URL = "https://data.caltech.edu/records/nyy15-4j048"
CALTECH_CLUTTER = "257.clutter"


@dataclass(frozen=True)
class Caltech256Options:
    """Images centre-cropped and resized to ``size`` once (then cached); a stratified train/test split (the set has none).

    ``include_clutter``: keep class 257 (clutter); ``test_fraction`` / ``split_seed``: the split.
    """

    size: int = 64
    include_clutter: bool = False
    test_fraction: float = 0.2
    split_seed: int = 0

    def validate(self, section: str) -> None:
        if not 8 <= self.size <= 512:
            raise ConfigError(f"{section}.size", f"must be in [8, 512], got {self.size}")
        if not 0 < self.test_fraction < 1:
            raise ConfigError(f"{section}.test_fraction", f"must be in (0, 1), got {self.test_fraction}")
        if not 0 <= self.split_seed < 2**63:
            raise ConfigError(f"{section}.split_seed", f"must be in [0, 2**63), got {self.split_seed}")


def caltech256_root(data_dir: Path) -> Path:
    return _find_dir(data_dir, "caltech256", "Caltech-256", CALTECH_URL, "<NNN.name>/*.jpg folders")


CALTECH256_OUTPUT = 1
"""Output version of the Caltech-256 loader and its split (``datasets.build_caltech256``), in its cache key: bump it when what they produce changes."""


def load_caltech256_images(data_dir: Path, opts: Caltech256Options) -> tuple[np.ndarray, np.ndarray, int]:
    """All images (classes = sorted ``NNN.name`` folders, files sorted by name) and labels; the split is the caller's."""
    root = caltech256_root(data_dir)
    classes = sorted(d.name for d in _listing(root) if is_dir(d) and d.name[:3].isdigit() and (opts.include_clutter or d.name != CALTECH_CLUTTER))
    paths: list[Path] = []
    labels: list[int] = []
    for c, name in enumerate(classes):
        files = [p for p in _listing(root / name) if p.suffix.lower() in (".jpg", ".jpeg") and is_file(p)]
        paths += files
        labels += [c] * len(files)
    return _decode_all(paths, opts.size, crop=True), np.array(labels, dtype=np.int64), len(classes)


# ---------------------------------------------------------------- FEMNIST (LEAF json)

FEMNIST_URL = "https://leaf.cmu.edu/"
FEMNIST_CLASSES = 62
LEAF_FEMNIST_SAMPLES, LEAF_FEMNIST_WRITERS = 805_263, 3_550
"""LEAF's FEMNIST (docs/datasets.md, "Sources"): 805,263 samples of 3,550 writers, about 227 a writer."""


@dataclass(frozen=True)
class FemnistOptions:
    """LEAF's sampling, applied by writer (see docs/datasets.md).

    ``sample_fraction``: LEAF's ``--sf`` with ``-s niid``: writers are taken in a seeded random order
    until they hold this fraction of all samples (1.0: every writer). ``min_samples``: LEAF's ``-k``:
    writers with fewer samples are dropped. ``train_fraction``: LEAF's ``--tf`` with ``-t sample``: each
    writer's own train/test split, max(1, floor(tf * n)) train samples; writers with fewer than 2
    samples are dropped, as LEAF does (only for ``all_data``; LEAF's own ``train``/``test`` folders are
    kept as they are). ``max_writers``: keep the first N selected writers that are not dropped (0: all; FLex&Chill uses 36).
    """

    sample_fraction: float = 1.0
    min_samples: int = 0
    train_fraction: float = 0.9
    max_writers: int = 0
    split_seed: int = 0

    def validate(self, section: str) -> None:
        if not 0 < self.sample_fraction <= 1:
            raise ConfigError(f"{section}.sample_fraction", f"must be in (0, 1], got {self.sample_fraction}")
        if not 0 <= self.min_samples < 2**31:
            raise ConfigError(f"{section}.min_samples", f"must be in [0, 2**31), got {self.min_samples}")
        if not 0 < self.train_fraction < 1:
            raise ConfigError(f"{section}.train_fraction", f"must be in (0, 1), got {self.train_fraction}")
        if not 0 <= self.max_writers < 2**31:
            raise ConfigError(f"{section}.max_writers", f"must be >= 0, got {self.max_writers}")
        if not 0 <= self.split_seed < 2**63:
            raise ConfigError(f"{section}.split_seed", f"must be in [0, 2**63), got {self.split_seed}")


Writers = dict[str, tuple[np.ndarray, np.ndarray]]


def read_leaf_json(folder: Path) -> Writers:
    """Every ``*.json`` in ``folder`` (sorted) in LEAF's format: {users, num_samples, user_data: {user: {x, y}}}."""
    writers: Writers = {}
    files = _listing(folder, "*.json") if is_dir(folder) else []
    if not files:
        raise ConfigError(DATA_DIR_FIELD, f"no LEAF *.json files in {folder}")
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                blob = json_loads(f.read())
            users, counts, data = blob["users"], blob["num_samples"], blob["user_data"]
            if len(users) != len(counts):
                raise ValueError(f"{len(users)} users but {len(counts)} num_samples")
            for user, n in zip(users, counts):
                x = np.asarray(data[user]["x"], dtype=np.float32)
                y = _integers(data[user]["y"], f"writer {user}: labels").astype(np.int64)  # 1.7 is not class 1
                if n == 0:  # a writer without samples: json's [] has no row width
                    x = x.reshape(0, 784)
                if x.shape != (n, 784) or y.shape != (n,) or (n and (y.min() < 0 or y.max() >= FEMNIST_CLASSES)):
                    raise ValueError(f"writer {user}: x {x.shape}, y {y.shape} (expected {n} x 784 and labels 0..61)")
                if not np.isfinite(x).all():
                    raise ValueError(f"writer {user}: non-finite pixel values")
                if user in writers:
                    raise ValueError(f"writer {user} appears twice")
                writers[str(user)] = (x.reshape(n, 1, 28, 28), y)
        except (OSError, KeyError, TypeError, ValueError) as exc:  # json_loads: any damaged JSON is a ValueError
            raise _corrupt(path, exc) from exc
    return writers


def femnist_root(data_dir: Path) -> Path:
    return _find_dir(data_dir, "femnist", "FEMNIST", FEMNIST_URL, "LEAF's all_data/*.json or train/ and test/ *.json")


def select_writers(counts: list[int], opts: FemnistOptions, at_least: int = 1) -> list[int]:
    """Indices of the writers kept, in their original order (see :class:`FemnistOptions`).

    ``at_least``: writers with fewer samples are dropped before ``max_writers`` cuts, so that the cut keeps N
    writers where there are N usable ones (2 for ``all_data``: a writer needs a train and a test sample)."""
    rng = np.random.default_rng(opts.split_seed)
    order = rng.permutation(len(counts))
    target = opts.sample_fraction * sum(counts)
    chosen: list[int] = []
    total = 0
    for i in order:
        if total >= target and opts.sample_fraction < 1:
            break
        chosen.append(int(i))
        total += counts[i]
    kept = sorted(i for i in chosen if counts[i] >= max(opts.min_samples, at_least, 1))
    return kept[: opts.max_writers] if opts.max_writers else kept


FEMNIST_OUTPUT = 3
"""Output version of the FEMNIST loader and its stacking (``datasets.build_femnist``), in its cache key: bump it when what they produce changes.
3: LEAF test/ writers missing from train/ are refused (2 cached a test set without them: such an entry must not be served)."""


def _check_leaf_split(train: Writers, test: Writers, root: Path) -> None:
    """Refuse test writers that train/ does not hold: a client is a writer, its test part the writer's own samples.

    Why: the test set was built for train/'s writers only, so such writers' samples vanished from the global test set
    silently. LEAF's ``split_data.py -t sample`` (the per-writer split chillfl reads) puts every writer in both;
    writers missing from train/ mean its ``-t user`` split (writers held out whole), which has no per-writer test part."""
    extra = [u for u in test if u not in train]
    if not extra:
        return
    samples = sum(len(test[u][1]) for u in extra)
    disjoint = not any(u in train for u in test)
    why = ("LEAF's '-t user' split, which holds writers out whole: chillfl reads the per-writer '-t sample' split"
           if disjoint else "each writer's test samples must be its own, beside its train samples (LEAF's '-t sample' split)")
    raise ConfigError(DATA_DIR_FIELD, f"{root / 'test'} holds {len(extra)} writer(s) ({samples} samples) not in {root / 'train'}, e.g. {extra[0]!r}: "
                                      f"{why}; rerun split_data.py with -t sample, or leave only LEAF's all_data/ there (train_fraction splits each writer)")


def load_femnist_writers(data_dir: Path, opts: FemnistOptions) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[tuple[np.ndarray, np.ndarray]]]:
    """Per kept writer, its (x, y) train and test parts."""
    root = femnist_root(data_dir)
    if is_dir(root / "train"):
        train = read_leaf_json(root / "train")
        if not is_dir(root / "test"):  # else an empty test split, refused only after the cache was written
            raise ConfigError(DATA_DIR_FIELD, f"{root / 'train'} has no test/ beside it: LEAF's split_data.py writes train/ and test/ together "
                                              f"(or leave only LEAF's all_data/ there: train_fraction splits each writer)")
        test = read_leaf_json(root / "test")
        _check_leaf_split(train, test, root)
        names = list(train)
        empty = (np.zeros((0, 1, 28, 28), np.float32), np.zeros(0, np.int64))
        counts = [len(train[u][1]) + len(test.get(u, empty)[1]) for u in names]
        kept = select_writers(counts, opts)
        return [train[names[i]] for i in kept], [test.get(names[i], empty) for i in kept]
    writers = read_leaf_json(root / "all_data")
    names = list(writers)
    kept = select_writers([len(writers[u][1]) for u in names], opts, at_least=2)  # LEAF's split_data drops writers of 1 sample
    trains, tests = [], []
    for i in kept:
        x, y = writers[names[i]]
        n = len(y)
        rng = np.random.default_rng(np.random.SeedSequence(opts.split_seed, spawn_key=(i,)))
        n_train = max(1, int(np.floor(opts.train_fraction * n)))
        perm = rng.permutation(n)
        tr, te = np.sort(perm[:n_train]), np.sort(perm[n_train:])
        trains.append((x[tr], y[tr]))
        tests.append((x[te], y[te]))
    return trains, tests

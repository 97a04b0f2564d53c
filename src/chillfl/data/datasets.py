"""Dataset registry: every dataset as one in-memory :class:`ArrayDataset`.

Embedded datasets need no download and have a fixed train/test split that does
not depend on the run seed:

``digits``     scikit-learn's 8x8 digits as 1x8x8 images, stratified 80/20 split.
``mnist1d``    Greydanus' MNIST-1D, generated procedurally by the ``mnist1d``
               package (shape 1x40).
``synthetic``  Synthetic(alpha, beta) of Li et al. 2020 (FedProx, Sec. 5.1), with
               its natural per-client split in ``train_groups`` / ``test_groups``.

Real datasets (``cifar10``, ``cifar100``, ``svhn``, ``mnist``, ``fashion_mnist``,
``emnist``, ``uci_har``, ``femnist``, ``tiny_imagenet``, ``caltech256``) are read
from ``data_dir`` by :mod:`chillfl.data.loaders`; ``chillfl data download NAME``
fetches them (see docs/datasets.md). The three slow-to-decode ones (FEMNIST's
JSON, the two JPEG sets) are standardised once into memory-mapped ``.npy``
files under ``data_dir/.chillfl-cache`` (:mod:`chillfl.data.arraycache`).

A user's dataset is named as a plugin is: ``name = "pkg.module:build"`` or a ``chillfl.plugins`` entry point, a
builder called as the built-ins' are (:func:`dataset_spec`, :func:`user_dataset`; docs/data.md).

Choices
-------
* Images are scaled to [0, 1] and then standardised per channel with the train
  set's mean and std (also ``digits`` and ``uci_har``); ``mnist1d`` keeps the
  package's own global standardisation; ``synthetic`` is left raw, as in FedProx.
* Synthetic: FedProx writes u_k ~ N(0, alpha), B_k ~ N(0, beta); its reference
  generator uses alpha and beta as standard deviations, and so do we. The
  covariance Sigma_jj = j^-1.2 is a variance. Client sizes are
  floor(lognormal(size_log_mean, size_log_sigma)) + min_samples (the
  "power law" sizes of FedProx; its defaults 4, 2, 50). Each client's samples
  are split 80/20 into train/test by a fixed seed (``test_fraction = 0.2``, our
  choice; FedProx's generator splits 90/10: ``test_fraction = 0.1`` matches it).
* ``mnist1d`` calls the package's generator, which seeds Python's and numpy's
  global RNGs; we save and restore both so that the caller's state is untouched.

Checked against (2026-12): torchvision's ToTensor (uint8/255) + Normalize with train-split channel mean/std (CIFAR-10 0.4914/0.4822/0.4465, 0.2470/0.2435/0.2616), the same on test.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
import inspect
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
# numpy imports np.ma (np.unique's) and np.random on first use: here, under the command's held start (chillfl/cli.py),
# not in a comparison's check of its runs, where a signal's exception could land inside (and be lost in) their import
import numpy.ma  # noqa: F401
import numpy.random  # noqa: F401
import torch

from chillfl.global_rng import GLOBAL_RNG
from chillfl.data import arraycache, hf, leaf_hub, loaders
from chillfl.data.checks import checked_arrays, checked_groups
from chillfl.data.augment import check_shape, final_stats, rescaler, split_augment
from chillfl.data.items import ItemReader
from chillfl.data.loaders import RawSplit
from chillfl.data.values import InputValues, input_values
from chillfl.errors import ConfigError
from chillfl.extras import need, package_file
from chillfl.options import FLOAT32_MAX, AtMost, Chosen, NoOptions, Scale, blame, parse_options, require, require_memory, require_range, short_repr
from chillfl.plugins import building, check_hooks, look_up, plugin_names

MAX_SEED = 2**63 - 1
MAX_NUMPY_LEGACY_SEED = 2**32 - 1
"""``np.random.seed`` (used by the mnist1d package) takes seeds below 2**32."""


@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """A dataset held in memory as tensors, with a fixed train/test split."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    train_groups: tuple[np.ndarray, ...] | None = None
    test_groups: tuple[np.ndarray, ...] | None = None
    channel_mean: tuple[float, ...] | None = None
    channel_std: tuple[float, ...] | None = None
    """The per-channel standardisation chillfl applied (x = (raw - mean) / std); None: inputs as generated."""
    public_rows: int = 0
    """The last ``public_rows`` train rows are a separate public set (passed from Python): never given
    to a client, they are the soft-label methods' public pool (label -1 where none was given)."""
    train_items: ItemReader | None = None
    """The user's training Dataset when its items are read anew each round a client is sampled
    (``DatasetData(redraw="round")``; :mod:`chillfl.data.items`); None: ``x_train`` is what clients train on."""

    def __post_init__(self) -> None:
        if len(self.x_train) != len(self.y_train) or len(self.x_test) != len(self.y_test):
            raise ValueError(f"dataset {self.name!r}: inputs and labels differ in length")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @functools.cached_property
    def split_values(self) -> tuple[InputValues, InputValues]:
        """What the train and test inputs hold (:mod:`chillfl.data.values`), computed once for this dataset object.

        Kept with the dataset, not in a cache beside it: every run that shares the loaded arrays shares the answer,
        and a dataset with other arrays (``dataclasses.replace``, ``.to(device)``, a backdoor's stamped copy) is
        another object, asked anew. chillfl never writes into a dataset's arrays in place.
        """
        return input_values(self.x_train), input_values(self.x_test)


# ---------------------------------------------------------------- helpers


def standardise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel (axis 1) standardisation with train statistics, as float32 tensors."""
    return standardise_with_stats(x_train, x_test)[:2]


def standardise_with_stats(x_train: np.ndarray, x_test: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, tuple[float, ...], tuple[float, ...]]:
    """:func:`standardise`, and the (mean, std) per channel it used (for ``[dataset.augment] normalize``)."""
    axes = tuple(i for i in range(x_train.ndim) if i != 1)
    mean = x_train.mean(axis=axes, dtype=np.float64, keepdims=True)
    std = x_train.std(axis=axes, dtype=np.float64, keepdims=True)
    mean32 = mean.astype(np.float32)
    std32 = np.where(std > 0, std, 1.0).astype(np.float32)

    def norm(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy((x.astype(np.float32, copy=False) - mean32) / std32)

    return norm(x_train), norm(x_test), tuple(float(v) for v in mean32.ravel()), tuple(float(v) for v in std32.ravel())


def _from_raw(name: str, raw: RawSplit) -> ArrayDataset:
    for x, y, part in ((raw.x_train, raw.y_train, "train"), (raw.x_test, raw.y_test, "test")):
        if len(y) == 0:  # nothing to train on or to score: an empty file, not a dataset
            raise ConfigError(loaders.DATA_DIR_FIELD, f"{name} {part} split is empty: corrupt files?")
        if y.min() < 0 or y.max() >= raw.num_classes:
            raise ConfigError(loaders.DATA_DIR_FIELD, f"{name} {part} labels outside 0..{raw.num_classes - 1}: corrupt files?")
        if x.dtype.kind == "f" and not np.isfinite(x).all():  # would show only as a NaN training loss
            raise ConfigError(loaders.DATA_DIR_FIELD, f"{name} {part} inputs hold NaN or infinite values: corrupt files?")
    if raw.x_train.shape[1:] != raw.x_test.shape[1:]:  # else a shape error in the first evaluation
        raise ConfigError(loaders.DATA_DIR_FIELD, f"{name} train inputs are {list(raw.x_train.shape[1:])} but test inputs {list(raw.x_test.shape[1:])}: corrupt files?")
    scale = np.float32(255.0 if raw.x_train.dtype == np.uint8 else 1.0)
    x_train, x_test, mean, std = standardise_with_stats(raw.x_train.astype(np.float32) / scale, raw.x_test.astype(np.float32) / scale)
    return ArrayDataset(
        name,
        x_train,
        torch.from_numpy(raw.y_train.astype(np.int64)),
        x_test,
        torch.from_numpy(raw.y_test.astype(np.int64)),
        raw.num_classes,
        channel_mean=mean,
        channel_std=std,
    )


def stratified_split(labels: np.ndarray, test_fraction: float, rng: np.random.Generator, rows: str = "rows") -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, test) indices with round(test_fraction * n_c) test samples of each class c.

    An empty side is refused here, on ``dataset.test_fraction`` (``rows``: what the labels label, for the message), for
    every dataset split this way: digits at 0.001 ran with an empty test set (null metrics blamed on non-finite logits,
    a divergence under --strict), and at 0.999 with an empty train set that failed later on another field.
    """
    test = []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        test.append(idx[: int(np.floor(test_fraction * len(idx) + 0.5))])
    test_idx = np.sort(np.concatenate(test))
    train_idx = np.setdiff1d(np.arange(len(labels)), test_idx)
    for side, idx in (("test", test_idx), ("train", train_idx)):
        require(len(idx) > 0, "dataset.test_fraction", f"{test_fraction} of each class's {rows} leaves an empty train or test split of the {len(labels)} {rows} "
                                                     f"(here the {side} split)")
    return train_idx, test_idx


# ---------------------------------------------------------------- embedded datasets


@dataclass(frozen=True)
class DigitsOptions:
    """``test_fraction``: share of each class held out; ``split_seed``: fixes the split."""

    test_fraction: float = 0.2
    split_seed: int = 0

    def validate(self, section: str) -> None:
        require(0 < self.test_fraction < 1, f"{section}.test_fraction", f"must be in (0, 1), got {self.test_fraction}")
        require_range(self.split_seed, 0, MAX_SEED, f"{section}.split_seed")


DIGITS_SHAPE = (1797, 65)
"""scikit-learn's digits CSV: 1,797 images of 8 x 8 pixels, then the label."""


@functools.cache
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits, read once a process and read-only: parsing its CSV took 60 ms, paid by every run of a
    comparison or sweep (108 runs in one process for a tuned 3-seed table).

    The CSV is read as scikit-learn's ``load_digits`` reads it (``np.loadtxt``, comma-separated; the last column the
    label), without importing scikit-learn, whose import cost a digits run 0.75-1.3 s of start-up; where the file is
    not where scikit-learn 1.x keeps it, or not of digits' shape, ``load_digits`` reads it.
    """
    path = package_file("sklearn", "datasets", "the digits data", "datasets", "data", "digits.csv.gz")
    table = None if path is None else np.loadtxt(path, delimiter=",")
    if table is not None and table.shape == DIGITS_SHAPE:
        x, y = table[:, :-1], table[:, -1].astype(int)
    else:
        x, y = need("sklearn.datasets", "datasets", "the digits data").load_digits(return_X_y=True)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def build_digits(opts: DigitsOptions, data_dir: Path) -> ArrayDataset:
    x, y = _digits_arrays()
    train, test = stratified_split(y, opts.test_fraction, np.random.default_rng(opts.split_seed), "images")  # before standardising: no NaN warnings
    images = (x / 16.0).reshape(-1, 1, 8, 8)
    x_train, x_test, mean, std = standardise_with_stats(images[train], images[test])
    y_train, y_test = torch.from_numpy(y[train].astype(np.int64)), torch.from_numpy(y[test].astype(np.int64))
    return ArrayDataset("digits", x_train, y_train, x_test, y_test, 10, channel_mean=mean, channel_std=std)


@dataclass(frozen=True)
class Mnist1dOptions:
    """``num_samples``: total generated (train + test); ``seed``: generator seed (42 = the package's default)."""

    num_samples: int = 5000
    seed: int = 42
    train_split: float = 0.8

    def validate(self, section: str) -> None:
        require(100 <= self.num_samples <= 200_000, f"{section}.num_samples", f"must be in [100, 200000], got {self.num_samples}")
        require(0 < self.train_split < 1, f"{section}.train_split", f"must be in (0, 1), got {self.train_split}")
        size = mnist1d_size(self)  # the generator trains on int(n * train_split) rows: 0 of 5000 at 0.0001
        require(size.train >= 1 and size.test >= 1, f"{section}.train_split", f"{self.train_split:g} of the {size.train + size.test} samples leaves "
                f"{size.train} to train and {size.test} to test: each side needs at least 1")
        require_range(self.seed, 0, MAX_NUMPY_LEGACY_SEED, f"{section}.seed")


@functools.lru_cache(maxsize=2)
def _mnist1d_arrays(num_samples: int, seed: int, train_split: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """MNIST-1D's (x, y, x_test, y_test), generated once a process for these options, read-only.

    Why: generating it (an interpolation a sample) takes about 1 s at 5,000 samples, and a comparison built it
    once a seed (its partitions differ, the generated arrays do not): 3 times for ``reproduce pa3fed``'s check alone.
    """
    mnist1d_data = need("mnist1d.data", "datasets", "the mnist1d data")
    args = mnist1d_data.get_dataset_args()
    args.num_samples, args.seed, args.train_split = num_samples, seed, train_split
    with GLOBAL_RNG:  # it seeds numpy's and Python's global generators: another thread's draws (a Dataset's items, under
        # the same lock) landed amid it, and the changed arrays stayed in this cache for every later run of the process
        py_state, np_state = random.getstate(), np.random.get_state()
        try:
            data = mnist1d_data.make_dataset(args)
        finally:
            random.setstate(py_state)
            np.random.set_state(np_state)
    arrays = (data["x"], data["y"], data["x_test"], data["y_test"])
    for a in arrays:
        a.setflags(write=False)
    return arrays


def mnist1d_size(opts: Mnist1dOptions) -> DatasetSize:
    """MNIST-1D's generator: ``num_samples // 10`` a class, the first ``int(train_split n)`` to train; 40-point signals, 10 classes."""
    n = opts.num_samples // 10 * 10
    train = int(n * opts.train_split)
    return DatasetSize(train, n - train, (1, 40), 10)


def build_mnist1d(opts: Mnist1dOptions, data_dir: Path) -> ArrayDataset:
    x_train, y_train, x_test, y_test = _mnist1d_arrays(opts.num_samples, opts.seed, opts.train_split)

    def x(a: np.ndarray) -> torch.Tensor:  # copies: a dataset's tensors never share memory with the cached arrays
        return torch.from_numpy(np.array(a, dtype=np.float32)[:, None, :])

    def y(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(a, dtype=np.int64))

    return ArrayDataset("mnist1d", x(x_train), y(y_train), x(x_test), y(y_test), 10)


@dataclass(frozen=True)
class SyntheticOptions:
    """FedProx Synthetic(alpha, beta): alpha = model heterogeneity, beta = input heterogeneity. ``test_fraction``: each
    client's share held out for test; 0.2 is chillfl's choice, FedProx's generator holds out 0.1 (set 0.1 to match it)."""

    num_clients: int = 30
    alpha: Scale = 1.0
    beta: Annotated[float, SYNTHETIC_BETA_BOUND] = 1.0
    dim: int = 60
    num_classes: int = 10
    seed: int = 0
    size_log_mean: float = 4.0
    size_log_sigma: float = 2.0
    min_samples: int = 50
    test_fraction: float = 0.2

    def validate(self, section: str) -> None:
        require_range(self.num_clients, 1, SYNTHETIC_MAX_CLIENTS, f"{section}.num_clients")
        require(self.alpha >= 0, f"{section}.alpha", f"must be >= 0, got {self.alpha}")
        require(self.beta >= 0, f"{section}.beta", f"must be >= 0, got {self.beta}")
        require_range(self.dim, 1, SYNTHETIC_MAX_DIM, f"{section}.dim")
        require_range(self.num_classes, 2, SYNTHETIC_MAX_DIM, f"{section}.num_classes")
        require_range(self.seed, 0, MAX_SEED, f"{section}.seed")
        require_range(self.size_log_mean, -SYNTHETIC_MAX_LOG, SYNTHETIC_MAX_LOG, f"{section}.size_log_mean")
        require_range(self.size_log_sigma, 0, SYNTHETIC_MAX_LOG, f"{section}.size_log_sigma")
        require_range(self.min_samples, 2, 2**31 - 1, f"{section}.min_samples")
        require(0 < self.test_fraction < 1, f"{section}.test_fraction", f"must be in (0, 1), got {self.test_fraction}")


SYNTHETIC_MAX_CLIENTS = 10**6
SYNTHETIC_BETA_BOUND = AtMost(FLOAT32_MAX / 1e3, "x ~ N(B, 1) with B ~ N(0, beta) is stored as float32: "
                              "a draw past 1000 sigma (probability below 1e-200000) would overflow it")
"""synthetic's beta bound: its features are beta times a normal draw, cast to float32 (beta = 1e308 leaked numpy's overflow warnings)."""
SYNTHETIC_MAX_DIM = 10**6
SYNTHETIC_MAX_LOG = 50.0
"""exp(50) samples is already absurd; beyond it lognormal sizes overflow int64."""


def synthetic_sizes(opts: SyntheticOptions, rng: np.random.Generator) -> np.ndarray:
    """Per-client sample counts (the generator's first draw) as floats, so they can be checked before casting."""
    return np.floor(rng.lognormal(opts.size_log_mean, opts.size_log_sigma, opts.num_clients)) + opts.min_samples


def synthetic_bytes(opts: SyntheticOptions) -> float:
    """Memory the generator needs: float64 draws and float32 copies of all samples, plus one client's logits."""
    with np.errstate(over="ignore"):
        sizes = synthetic_sizes(opts, np.random.default_rng(opts.seed))
        total, largest = float(sizes.sum()), float(sizes.max())
    return total * (opts.dim * 8 * 2 + 16) + largest * opts.num_classes * 8 + opts.num_classes * opts.dim * 8


def check_synthetic_memory(opts: SyntheticOptions, section: str) -> None:
    """Refuse, before generating anything, a Synthetic dataset larger than this machine's memory."""
    need = synthetic_bytes(opts)
    if not math.isfinite(need):
        need = math.inf
    field = blame(opts, synthetic_bytes, section, f"{section}.size_log_mean")
    require_memory(need, field, f"synthetic data ({opts.num_clients} clients x dim {opts.dim})")


def synthetic_client(
    rng: np.random.Generator, n: int, alpha: float, beta: float, dim: int, classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """n samples of one FedProx Synthetic client: x ~ N(v_k, Sigma), y = argmax(W_k x + b_k)."""
    u = rng.normal(0.0, alpha)  # u_k ~ N(0, alpha)
    w = rng.normal(u, 1.0, (classes, dim))  # W_k ~ N(u_k, 1)
    b = rng.normal(u, 1.0, classes)  # b_k ~ N(u_k, 1)
    big_b = rng.normal(0.0, beta)  # B_k ~ N(0, beta)
    v = rng.normal(big_b, 1.0, dim)  # v_k[j] ~ N(B_k, 1)
    var = np.arange(1, dim + 1, dtype=np.float64) ** -1.2  # Sigma_jj = j^-1.2
    x = v + rng.standard_normal((n, dim)) * np.sqrt(var)
    y = np.argmax(x @ w.T + b, axis=1)  # argmax of softmax == argmax of logits
    return x.astype(np.float32), y.astype(np.int64)


def build_synthetic(opts: SyntheticOptions, data_dir: Path) -> ArrayDataset:
    check_synthetic_memory(opts, "dataset")
    rng = np.random.default_rng(opts.seed)
    sizes = rng.lognormal(opts.size_log_mean, opts.size_log_sigma, opts.num_clients).astype(np.int64) + opts.min_samples
    train_parts: list[tuple[np.ndarray, np.ndarray]] = []
    test_parts: list[tuple[np.ndarray, np.ndarray]] = []
    for n in sizes:
        x, y = synthetic_client(rng, int(n), opts.alpha, opts.beta, opts.dim, opts.num_classes)
        perm = rng.permutation(int(n))
        n_test = max(1, int(np.floor(opts.test_fraction * n + 0.5)))
        train_parts.append((x[perm[n_test:]], y[perm[n_test:]]))
        test_parts.append((x[perm[:n_test]], y[perm[:n_test]]))
    left = sum(len(y) for _, y in train_parts)  # each client keeps n - round(test_fraction n), 0 for every one near 1
    require(left >= 1, "dataset.test_fraction", f"{opts.test_fraction:g} of each client's rows leaves no training rows among the {int(sizes.sum())} generated")

    def stack(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[torch.Tensor, torch.Tensor, tuple[np.ndarray, ...]]:
        ends = np.cumsum([len(p[1]) for p in parts])
        groups = tuple(np.arange(end - len(p[1]), end) for end, p in zip(ends, parts))
        xs = torch.from_numpy(np.concatenate([p[0] for p in parts]))
        return xs, torch.from_numpy(np.concatenate([p[1] for p in parts])), groups

    x_train, y_train, train_groups = stack(train_parts)
    x_test, y_test, test_groups = stack(test_parts)
    return ArrayDataset("synthetic", x_train, y_train, x_test, y_test, opts.num_classes, train_groups, test_groups)


# ---------------------------------------------------------------- registry


InputKind = Literal["real", "indices", "any"]
INPUT_KINDS: tuple[InputKind, ...] = ("real", "indices", "any")
"""What a dataset's inputs are, known before its files are read: ``real`` (features: pixels, signals, standardised
values), ``indices`` (whole-number token ids, as flwr_shakespeare's characters), ``any`` (its files decide: hf's columns)."""


class DatasetSize(NamedTuple):
    """What a dataset is, in numbers, without its files: an estimate made before anything is read or downloaded
    (``chillfl list experiments``'s cost model, ``chillfl reproduce --dry-run``'s time) prices a run by them."""

    train: int
    """Training rows (before a partitioner keeps some: its ``rows_kept``)."""
    test: int
    """Test rows (the global model's evaluation)."""
    input_shape: tuple[int, ...]
    """One sample's shape (``(1, 28, 28)``): the model's FLOPs a sample are counted on it."""
    classes: int


class DatasetEntry(NamedTuple):
    """A registered dataset: its options, its builder and its :data:`InputKind`, which a dry run without the
    files asks (a model that reads indices refuses ``real`` inputs then, before the values can be scanned)."""

    options: type
    build: Callable[[Any, Path], ArrayDataset]
    inputs: InputKind
    summary: str = ""
    """One line for ``chillfl list datasets`` and the reference (empty: its options' docstring's first line)."""
    size: Callable[[Any], DatasetSize] | None = None
    """Set: given its parsed options, about the :class:`DatasetSize` its builder makes (MNIST-1D's ``num_samples``,
    the writers FEMNIST's options keep), for estimates made without the data; called as ``size(options)``. None: the
    estimate knows it only where its size is fixed and listed (the bundled configs' datasets), else it prices no run of it."""


def _real(name: str, reader: Callable[[Path, Any], RawSplit]) -> Callable[[Any, Path], ArrayDataset]:
    def build(opts: Any, data_dir: Path) -> ArrayDataset:
        return _from_raw(name, reader(data_dir, opts))

    return build


def _mapped(name: str, m: arraycache.Mapped) -> ArrayDataset:
    def groups(bounds: np.ndarray | None) -> tuple[np.ndarray, ...] | None:
        return None if bounds is None else tuple(np.arange(bounds[g], bounds[g + 1], dtype=np.int64) for g in range(len(bounds) - 1))

    for y, part in ((m.y_train, "train"), (m.y_test, "test")):
        if len(y) == 0:  # else every metric of the run is null, silently
            raise ConfigError(loaders.DATA_DIR_FIELD, f"{name} {part} split is empty: missing or corrupt files?")
    return ArrayDataset(name, m.x_train, m.y_train, m.x_test, m.y_test, m.num_classes, groups(m.train_bounds), groups(m.test_bounds),
                        channel_mean=m.channel_mean, channel_std=m.channel_std)


def build_tiny_imagenet(opts: loaders.TinyImagenetOptions, data_dir: Path) -> ArrayDataset:
    root = loaders.tiny_imagenet_root(data_dir)

    def decode() -> arraycache.Decoded:
        raw = loaders.load_tiny_imagenet(data_dir, opts)
        return arraycache.Decoded(raw.x_train, raw.y_train, raw.x_test, raw.y_test, raw.num_classes)

    return _mapped("tiny_imagenet", arraycache.cached("tiny_imagenet", opts, root, data_dir, decode, output_version=loaders.TINY_IMAGENET_OUTPUT))


def build_caltech256(opts: loaders.Caltech256Options, data_dir: Path) -> ArrayDataset:
    root = loaders.caltech256_root(data_dir)

    def decode() -> arraycache.Decoded:
        x, y, num_classes = loaders.load_caltech256_images(data_dir, opts)
        train, test = stratified_split(y, opts.test_fraction, np.random.default_rng(opts.split_seed), "images")
        return arraycache.Decoded(x[train], y[train], x[test], y[test], num_classes)

    return _mapped("caltech256", arraycache.cached("caltech256", opts, root, data_dir, decode, output_version=loaders.CALTECH256_OUTPUT))


def build_femnist(opts: loaders.FemnistOptions, data_dir: Path) -> ArrayDataset:
    """FEMNIST with its writers as ``train_groups`` / ``test_groups`` (contiguous rows: client slices are views)."""
    root = loaders.femnist_root(data_dir)

    def decode() -> arraycache.Decoded:
        trains, tests = loaders.load_femnist_writers(data_dir, opts)
        if not trains:
            raise ConfigError("dataset.min_samples", "no FEMNIST writer is left after sampling")

        def stack(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            bounds = np.concatenate([[0], np.cumsum([len(p[1]) for p in parts])]).astype(np.int64)
            return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]), bounds

        x_train, y_train, b_train = stack(trains)
        x_test, y_test, b_test = stack(tests)
        return arraycache.Decoded(x_train, y_train, x_test, y_test, loaders.FEMNIST_CLASSES, b_train, b_test)

    return _mapped("femnist", arraycache.cached("femnist", opts, root, data_dir, decode, output_version=loaders.FEMNIST_OUTPUT))


def femnist_size(opts: loaders.FemnistOptions) -> DatasetSize:
    """LEAF's FEMNIST as its options select it, from LEAF's published counts (its files unread): ``max_writers`` writers of
    the mean size, else ``sample_fraction`` of the samples; each writer's ``train_fraction`` to train (``min_samples`` is
    left out: it drops few rows)."""
    samples = loaders.LEAF_FEMNIST_SAMPLES * opts.sample_fraction
    if opts.max_writers:
        samples = min(samples, opts.max_writers * loaders.LEAF_FEMNIST_SAMPLES / loaders.LEAF_FEMNIST_WRITERS)
    train = math.floor(samples * opts.train_fraction)
    return DatasetSize(train, round(samples) - train, (1, 28, 28), loaders.FEMNIST_CLASSES)


def _fixed_size(size: DatasetSize, options: Any) -> DatasetSize:
    """A dataset of one size whatever its options (CIFAR-10, SVHN, MNIST ...): :attr:`DatasetEntry.size`."""
    return size


def fixed_size(train: int, test: int, input_shape: tuple[int, ...], classes: int) -> Callable[[Any], DatasetSize]:
    """The ``size`` of a dataset whose options do not change its numbers."""
    return functools.partial(_fixed_size, DatasetSize(train, test, input_shape, classes))


DIGITS_CLASS_ROWS = (178, 182, 177, 183, 181, 182, 181, 179, 174, 180)
"""scikit-learn's digits, rows of each class 0-9 (1,797 in all): :func:`stratified_split` holds each class's share out."""


def digits_size(opts: DigitsOptions) -> DatasetSize:
    """scikit-learn's digits as :func:`build_digits` splits them: ``round(test_fraction * n_c)`` of each class held out."""
    test = sum(int(np.floor(opts.test_fraction * n + 0.5)) for n in DIGITS_CLASS_ROWS)
    return DatasetSize(sum(DIGITS_CLASS_ROWS) - test, test, (1, 8, 8), 10)


def cifar100_size(opts: loaders.Cifar100Options) -> DatasetSize:
    """CIFAR-100: its 100 fine classes, or 20 superclasses with ``labels = "coarse"``."""
    return DatasetSize(50000, 10000, (3, 32, 32), 100 if opts.labels == "fine" else 20)


def _grouped(name: str, reader: Callable[[Path, Any], arraycache.Mapped]) -> Callable[[Any, Path], ArrayDataset]:
    """A reader of arrays with natural client blocks (train_bounds / test_bounds) as a dataset builder."""

    def build(opts: Any, data_dir: Path) -> ArrayDataset:
        return _mapped(name, reader(data_dir, opts))

    return build


DATASETS: dict[str, DatasetEntry] = {
    "digits": DatasetEntry(DigitsOptions, build_digits, "real", "scikit-learn's 8x8 handwritten digits: 1,797 images, 10 classes (offline)",
                            digits_size),
    "mnist1d": DatasetEntry(Mnist1dOptions, build_mnist1d, "real", "MNIST-1D (Greydanus 2020): 40-point 1-D signals, 10 classes (offline)", mnist1d_size),
    "synthetic": DatasetEntry(SyntheticOptions, build_synthetic, "real", "FedProx's Synthetic(alpha, beta): 60 features, 10 classes (offline)"),
    "cifar10": DatasetEntry(loaders.NoOptions, _real("cifar10", loaders.load_cifar10), "real", "CIFAR-10: 50,000 + 10,000 32x32 colour images, 10 classes (download)",
                            fixed_size(50000, 10000, (3, 32, 32), 10)),
    "cifar100": DatasetEntry(loaders.Cifar100Options, _real("cifar100", loaders.load_cifar100), "real",
                             "CIFAR-100: 50,000 + 10,000 32x32 colour images, 100 or 20 classes (download)", cifar100_size),
    "svhn": DatasetEntry(loaders.NoOptions, _real("svhn", loaders.load_svhn), "real", "SVHN: 73,257 + 26,032 32x32 house-number digits, 10 classes (download)",
                         fixed_size(73257, 26032, (3, 32, 32), 10)),
    "mnist": DatasetEntry(loaders.NoOptions, _real("mnist", loaders.load_mnist), "real", "MNIST: 60,000 + 10,000 28x28 handwritten digits, 10 classes (download)",
                          fixed_size(60000, 10000, (1, 28, 28), 10)),
    "fashion_mnist": DatasetEntry(loaders.NoOptions, _real("fashion_mnist", loaders.load_fashion_mnist), "real",
                                  "Fashion-MNIST: 60,000 + 10,000 28x28 clothing images, 10 classes (download)",
                                  fixed_size(60000, 10000, (1, 28, 28), 10)),
    "uci_har": DatasetEntry(loaders.NoOptions, _real("uci_har", loaders.load_uci_har), "real", "UCI HAR: windows of 9 smartphone motion signals, 6 activities (download)"),
    "emnist": DatasetEntry(loaders.EmnistOptions, _real("emnist", loaders.load_emnist), "real", "EMNIST: NIST's 28x28 handwritten characters, one of six splits (download)"),
    "femnist": DatasetEntry(loaders.FemnistOptions, build_femnist, "real", "FEMNIST (LEAF): EMNIST by writer, 62 classes, a client a writer (download)",
                            femnist_size),
    "tiny_imagenet": DatasetEntry(loaders.TinyImagenetOptions, build_tiny_imagenet, "real", "Tiny ImageNet: 100,000 + 10,000 64x64 images, 200 classes (download)"),
    "caltech256": DatasetEntry(loaders.Caltech256Options, build_caltech256, "real", "Caltech-256: photos of 256 object classes, cropped and resized (download)"),
    "hf": DatasetEntry(hf.HFOptions, _real("hf", hf.load_hf), "any", "a Hugging Face dataset saved on disk: its input and label columns"),  # a local Hugging Face dataset (chillfl.data.hf)
    "flwr_femnist": DatasetEntry(leaf_hub.FemnistHubOptions, _grouped("flwr_femnist", leaf_hub.load_femnist), "real",
                                 "FEMNIST as Flower's hub holds it (flwrlabs/femnist): a client a writer"),  # chillfl.data.leaf_hub
    "flwr_shakespeare": DatasetEntry(leaf_hub.ShakespeareOptions, _grouped("flwr_shakespeare", leaf_hub.load_shakespeare), "indices",
                                     "LEAF Shakespeare from Flower's hub: next character, a client a role"),
}


BUILD_CALL = ("options", "data_dir")
"""How a dataset's builder is called, a built-in's and a plugin's alike: its parsed options and the run's ``data_dir``.
No run seed: a dataset is the same for every run seed (the seed draws the partition), so a comparison over seeds trains
on one split and a loaded public pool serves every run; a builder that draws declares its own seed option (digits'
``split_seed``)."""


SIZE_CALL = ("options",)
"""How a dataset's ``size`` is called (:attr:`DatasetEntry.size`): its parsed options alone (no files are read)."""


def dataset_names() -> list[str]:
    """Registered dataset names and the ``chillfl.plugins`` entry points that name a dataset, sorted."""
    return sorted({*DATASETS, *plugin_names(is_dataset, tuple(DATASETS), "dataset.name")})


def is_dataset(obj: Any) -> bool:
    """Whether a plugin's object is a dataset: a :class:`DatasetEntry`, or a function called as a builder is (two
    parameters: a model's builder takes four, a partitioner's split six; ``chillfl list`` tells them apart by that)."""
    if isinstance(obj, DatasetEntry):
        return True
    if not inspect.isfunction(obj):
        return False
    try:
        inspect.signature(obj).bind(*BUILD_CALL)
    except (TypeError, ValueError):
        return False
    return True


def user_dataset(obj: Any, name: str, field: str) -> DatasetEntry:
    """A user's object (import path or entry point) as a :class:`DatasetEntry`, or a ConfigError on ``field``.

    ``obj`` is a ``DatasetEntry`` (the built-ins' form, which declares its :data:`InputKind`), or a function called as
    the built-ins' builders are, ``build(options, data_dir)`` returning an :class:`ArrayDataset`, with ``options`` its
    ``Options`` dataclass parsed from the ``[dataset]`` table (:class:`~chillfl.options.NoOptions` when it declares
    none) and inputs ``any`` (its values decide, as ``hf``'s do). What it builds is checked as data passed from Python
    are (:func:`~chillfl.data.checks.checked_arrays`): one line on ``field``, not an error in a client mid-run.
    """
    if not (isinstance(obj, DatasetEntry) or inspect.isfunction(obj)):
        raise ConfigError(field, f"{name!r} must name a dataset: a DatasetEntry or a builder function, got {short_repr(obj)}")
    # for chillfl list: its docstring's first line (else its options' first line said "Options of a part that takes none")
    summary = (inspect.getdoc(obj) or "").partition("\n")[0] if inspect.isfunction(obj) else ""
    entry = obj if isinstance(obj, DatasetEntry) else DatasetEntry(inspect.getattr_static(obj, "Options", NoOptions), obj, "any", summary)
    if not (isinstance(entry.options, type) and dataclasses.is_dataclass(entry.options)):
        raise ConfigError(field, f"{name!r}: its options must be a dataclass, got {entry.options!r}")
    if entry.inputs not in INPUT_KINDS:
        raise ConfigError(field, f"{name!r}: its DatasetEntry's inputs must be one of {', '.join(map(repr, INPUT_KINDS))}, got {entry.inputs!r}")
    check_hooks(name, (("build", entry.build, BUILD_CALL), ("size", entry.size, SIZE_CALL)), field)
    size = None if entry.size is None else functools.partial(_checked_size, entry.size, name, field)
    return entry._replace(build=functools.partial(_checked_build, entry.build, name, field, entry.inputs), size=size)


def _checked_size(size: Callable[[Any], DatasetSize], name: str, field: str, options: Any) -> DatasetSize:
    """What a user's ``size`` returns, checked: one line on ``field``, not a traceback in the estimate that asked it."""
    with building(name, field, False, " (called as size(options))"):
        said = size(options)
    if not (isinstance(said, tuple) and len(said) == len(DatasetSize._fields)):
        raise ConfigError(field, f"{name!r}: its DatasetEntry's size must return a chillfl.extend.DatasetSize(train, test, input_shape, classes), "
                                 f"got {short_repr(said)}")
    train, test, shape, classes = said
    counts = [_count(n) for n in (train, test, classes, *(shape if isinstance(shape, tuple) else ()))]
    if not (isinstance(shape, tuple) and shape and all(n is not None and n > 0 for n in counts)):
        raise ConfigError(field, f"{name!r}: its DatasetEntry's size must give whole counts > 0 and an input shape tuple, got {short_repr(said)}")
    whole = [n for n in counts if n is not None]
    return DatasetSize(whole[0], whole[1], tuple(whole[3:]), whole[2])


def _count(n: object) -> int | None:
    """``n`` as a Python int when it is a whole number of any integer type (NumPy's ``int64`` from ``arr.shape``
    arithmetic included), not a bool or a float; else None."""
    if isinstance(n, bool):
        return None
    try:
        return operator.index(n)  # type: ignore[arg-type]
    except TypeError:
        return None


def _checked_build(build: Callable[[Any, Path], ArrayDataset], name: str, field: str, inputs: InputKind, options: Any, data_dir: Path) -> ArrayDataset:
    """What a user's builder returns, checked and held as the built-ins hold theirs (CPU tensors, float32 inputs, int64 labels).

    ``inputs = "real"`` (a ``DatasetEntry`` that says so): integer inputs become float32: uint8 divided by 255
    as :func:`_from_raw` divides the built-ins', other integers as they are; not standardised per channel afterwards,
    as the built-ins are (a user's float inputs are not either). Why: a uint8 image array, the
    common on-disk form, otherwise met a float model as a dtype error in round 1."""
    with building(name, field, False, " (called as build(options, data_dir))"):  # only a user's builder is wrapped here
        built = build(options, data_dir)
    if not isinstance(built, ArrayDataset):
        raise ConfigError(field, f"{name!r} must return a chillfl.ArrayDataset, got {short_repr(built)}")
    try:
        arrays = checked_arrays(built.x_train, built.y_train, built.x_test, built.y_test, built.num_classes, torch.float32, prefix="dataset")
        train_groups = checked_groups(built.train_groups, len(arrays.y_train), "dataset.train_groups", "train")
        test_groups = checked_groups(built.test_groups, len(arrays.y_test), "dataset.test_groups")
    except ConfigError as exc:  # on the key the user set: the builder it names made these arrays
        raise ConfigError(field, f"{name!r} returned an ArrayDataset whose {exc.field.removeprefix('dataset.')} {exc.message}") from None
    x_train, x_test = (_real_inputs(arrays.x_train), _real_inputs(arrays.x_test)) if inputs == "real" else (arrays.x_train, arrays.x_test)
    return dataclasses.replace(built, x_train=x_train, y_train=arrays.y_train, x_test=x_test, y_test=arrays.y_test,
                               num_classes=arrays.num_classes, train_groups=train_groups, test_groups=test_groups)


def _real_inputs(x: torch.Tensor) -> torch.Tensor:
    """Integer inputs as float32, scaled as :func:`_from_raw` scales the built-ins' (uint8 / 255); floats unchanged."""
    if x.is_floating_point():
        return x
    return x.to(torch.float32) / 255.0 if x.dtype == torch.uint8 else x.to(torch.float32)


def dataset_spec(name: object, section: str = "dataset") -> DatasetEntry:
    """The registered dataset ``name``, or a user's (``"pkg.module:build"``, a ``chillfl.plugins`` entry point);
    a ConfigError on ``<section>.name`` when there is none."""
    entry: DatasetEntry = look_up(name, f"{section}.name", DATASETS, is_dataset, dataset_names, user_dataset)
    return entry


def dataset_size(table: Mapping[str, Any]) -> DatasetSize | None:
    """The numbers of the dataset a config's ``[dataset]`` table names, its files unread, as its spec declares them from
    its options (:attr:`DatasetEntry.size`: CIFAR-10's fixed ones, MNIST-1D's ``num_samples``, the writers LEAF's
    FEMNIST keeps, a plugin's own); None: its spec declares none, or the name is no dataset (the run itself says why).
    Estimates made before anything is read ask it: the catalogue's cost model, a dry run's model check."""
    name, options = table.get("name"), {k: v for k, v in table.items() if k != "name"}
    try:
        sized = dataset_spec(name).size
    except ConfigError:
        return None
    return None if sized is None else sized(dataset_options(str(name), split_augment(options)[0]))


def dataset_options(name: str, options: Mapping[str, Any] | None, section: str = "dataset") -> Any:
    """Dataset ``name``'s options parsed from ``options`` (its table without ``name`` and ``augment``)."""
    return parse_options(dataset_spec(name, section).options, options, section, Chosen(f"{section}.name", name, lambda: DATASETS))


def load_dataset(
    name: str,
    options: Mapping[str, Any] | None = None,
    *,
    data_dir: str | Path = "data",
    section: str = "dataset",
) -> ArrayDataset:
    """Build dataset ``name`` (registered, or a user's builder: :func:`dataset_spec`) from its option table (the
    ``[dataset]`` table without ``name``)."""
    entry = dataset_spec(name, section)
    options, augment = split_augment(options)  # [dataset.augment]: normalisation here, crop/flip per training batch
    opts: Any = dataset_options(name, options, section)
    dataset = entry.build(opts, Path(data_dir))
    check_shape(augment, dataset.input_shape, name)
    scale = rescaler(augment, dataset.channel_mean, dataset.channel_std, dataset.input_shape[0] if dataset.input_shape else 1, name)
    if scale is None:
        return dataset
    mean, std = final_stats(augment, dataset.input_shape[0])
    return dataclasses.replace(dataset, x_train=scale(dataset.x_train), x_test=scale(dataset.x_test), channel_mean=mean, channel_std=std)

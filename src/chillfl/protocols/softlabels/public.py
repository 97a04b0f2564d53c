"""The public pool P: its inputs (every client predicts on them), its labels (public-set pretraining) and each round's draw."""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from typing import Any

import numpy as np
import torch

from chillfl.data import load_dataset
from chillfl.data.augment import split_augment
from chillfl.data.datasets import DATASETS, DatasetEntry, dataset_options
from chillfl.errors import ConfigError
from chillfl.global_rng import forked_rng
from chillfl.options import require
from chillfl.plugins import resolve
from chillfl.seeds import derive_seed
from chillfl.settings.distillation import SECTION, DistillationOptions, DistillationSetup


@functools.lru_cache(maxsize=2)
def _load_public_dataset(name: str, options_json: str, data_dir: str) -> Any:
    return load_dataset(name, json.loads(options_json), data_dir=data_dir)


def as_public(exc: ConfigError) -> ConfigError:
    """An error of the public dataset's table, on the ``[distillation]`` option that set what it blames: ``dataset.X``
    (``dataset.augment.X``) is ``distillation.public_dataset_options.X`` (``...augment.X``), so the bad key is named."""
    if exc.field != "dataset" and not exc.field.startswith("dataset."):
        return exc
    message = exc.message.replace("(set dataset.name", f"(set {SECTION}.public_dataset")  # an unknown option's hint names the chooser
    if exc.field == "dataset.name":
        return ConfigError(f"{SECTION}.public_dataset", message)
    return ConfigError(f"{SECTION}.public_dataset_options{exc.field.removeprefix('dataset')}", message)


def check_public_dataset(c: DistillationOptions) -> None:
    """The public dataset's name and options, without its files (a dry run without the data checks these only);
    :func:`public_inputs` refuses the same mistakes in the same words when it loads the dataset."""
    if c.public_dataset is None:
        return
    try:
        dataset_options(c.public_dataset, split_augment(c.public_dataset_options)[0])
    except ConfigError as exc:
        raise as_public(exc) from None


def public_inputs(setup: DistillationSetup, data: Any, seed: int, data_dir: str) -> torch.Tensor:
    """The public pool P as inputs ``[|P|, ...]`` (row i = public index i); its labels are never used.

    Same dataset: ``FederatedData.public()`` (carved before partitioning).
    Separate dataset: a seeded uniform subset of ``public_size`` rows of its
    train split, which must have the private data's input shape.
    """
    c = setup.common
    field_name = f"{SECTION}.public_dataset"
    if c.public_dataset is None:
        x = data.public()
        require(len(x) == c.public_size, f"{SECTION}.public_size", f"the public pool has {len(x)} samples, expected {c.public_size}")
        return x
    try:
        ds = _load_public_dataset(c.public_dataset, json.dumps(c.public_dataset_options, sort_keys=True), str(data_dir))
    except ConfigError as exc:
        raise as_public(exc) from None
    shape = tuple(data.dataset.input_shape)
    require(
        tuple(ds.input_shape) == shape,
        field_name,
        f"{c.public_dataset!r} has input shape {tuple(ds.input_shape)}, the private data {shape}; they must match",
    )
    n = len(ds.x_train)
    require(c.public_size <= n, f"{SECTION}.public_size", f"must be <= the {n} train samples of {c.public_dataset!r}, got {c.public_size}")
    rng = np.random.default_rng(derive_seed(seed, "public-pool"))
    rows = np.sort(rng.permutation(n)[: c.public_size])
    return in_private_scale(ds.x_train[torch.from_numpy(rows)], ds, data.dataset)


def same_dataset(public: str, run: object) -> bool:
    """Whether ``public_dataset`` names the run's own dataset ``run`` (its ``dataset.name``): the same name, or two names
    of one user's builder (``module:builder``, an entry point aliasing it, a ``DatasetEntry`` wrapping it).

    Why: a plugin's :class:`ArrayDataset` carries the name its builder chose (``"blobs"``), never the config's
    (``"my_data:blobs"``), so comparing with that let a plugin run draw its pool from its own training rows."""
    if public == run:
        return True
    if not isinstance(run, str) or public in DATASETS or run in DATASETS:
        return False
    try:
        ours, theirs = resolve(public, f"{SECTION}.public_dataset"), resolve(run, "dataset.name")
    except ConfigError:  # the run loaded both already: a name that no longer resolves is not the run's
        return False

    def builder(obj: Any) -> Any:
        return obj.build if isinstance(obj, DatasetEntry) else obj

    return ours is not None and builder(ours) is builder(theirs)


def refuse_own_rows(c: DistillationOptions, pool: torch.Tensor, private: Any, run_dataset: object = None) -> None:
    """Refuse a pool drawn from the run's own dataset that holds rows of its training or test data.

    Why: ``public_dataset = "digits"`` on a digits run drew the pool from digits' train split again, which is the
    clients' private data (and, with another ``split_seed`` or ``test_fraction``, the test set): an overlap nothing
    said. Leaving ``public_dataset`` unset carves a disjoint pool. Another draw of a generated dataset (mnist1d with
    another generator ``seed``) shares no rows and runs. ``pool`` is in the private scale (:func:`in_private_scale`), so
    a shared image is the private row up to rounding; rows are compared at 1e-2 of a standard deviation.
    ``run_dataset``: the run's ``dataset.name`` (a plugin's, :func:`same_dataset`); None: the data came from Python."""
    if c.public_dataset is None or pool.numel() == 0:
        return
    if not (c.public_dataset == private.name or same_dataset(c.public_dataset, run_dataset)):
        return

    def rows(x: torch.Tensor, block: int = 4096) -> set[bytes]:  # digests, in blocks: CIFAR's 60,000 rows whole would be GBs
        flat = x.reshape(len(x), -1)
        return {hashlib.blake2b(row.tobytes(), digest_size=16).digest() for start in range(0, len(flat), block)
                for row in torch.round(flat[start:start + block].to(torch.float64) * 100).to(torch.int64).numpy()}

    shared = len(rows(pool) & (rows(private.x_train) | rows(private.x_test)))
    require(shared == 0, f"{SECTION}.public_dataset",
            f"{c.public_dataset!r} is the run's own dataset: the pool would hold {shared} of its training or test rows; "
            "leave public_dataset unset to carve a disjoint pool from the training split")


def in_private_scale(x: torch.Tensor, public: Any, private: Any) -> torch.Tensor:
    """Public inputs ``x`` re-standardised with the private data's per-channel (mean, std) instead of their own.

    The clients' models learnt on inputs (raw - mean_priv) / std_priv; every reference pipeline (SCARLET's, DS-FL's)
    puts the public images through that same transform. chillfl standardises each dataset with its own train
    statistics, so CIFAR-100 as CIFAR-10's pool would otherwise reach the models on another scale. Unchanged when
    either dataset records no standardisation (generated or memory-mapped data, token indices).
    """
    pm, ps, qm, qs = public.channel_mean, public.channel_std, private.channel_mean, private.channel_std
    if pm is None or ps is None or qm is None or qs is None or not len(pm) == len(ps) == len(qm) == len(qs) or (pm, ps) == (qm, qs):
        return x
    shape = [1, -1] + [1] * (x.dim() - 2)

    def col(v: tuple[float, ...]) -> torch.Tensor:
        return torch.tensor(v, dtype=x.dtype).view(shape)

    return (x * col(ps) + (col(pm) - col(qm))) / col(qs)


def public_labels(setup: DistillationSetup, data: Any, seed: int, data_dir: str, option: str) -> torch.Tensor:
    """The labels of the public pool, row for row with :func:`public_inputs` (public-set pretraining uses them).

    ``option``: the method's option that asked for them (``[distillation]``), named when they are unusable.
    """
    c = setup.common
    if c.public_dataset is None:
        y = data.dataset.y_train[torch.from_numpy(data.public_indices)]
        require(len(y) == 0 or int(y.min()) >= 0, f"{SECTION}.{option}",
                "transfer learning trains on the public set's labels, and the public set passed from Python has none: pass public=(x, y) or set it to 0")
        return y
    ds = _load_public_dataset(c.public_dataset, json.dumps(c.public_dataset_options, sort_keys=True), str(data_dir))
    rng = np.random.default_rng(derive_seed(seed, "public-pool"))
    rows = np.sort(rng.permutation(len(ds.x_train))[: c.public_size])
    y = ds.y_train[torch.from_numpy(rows)]
    require(
        len(y) == 0 or int(y.max()) < data.num_classes,
        f"{SECTION}.{option}",
        f"transfer learning trains on {c.public_dataset!r}'s labels, which exceed the private data's {data.num_classes} classes; set it to 0",
    )
    return y


def one_sample_failure(model: torch.nn.Module, x: torch.Tensor) -> str | None:
    """Why ``model`` cannot train on a batch of one sample (``x``: at least one input row), None when it can.

    Batch norm over features cannot normalise one value per channel: torch raises in the train-mode forward, a
    traceback mid-run. A train-mode forward of one row through a copy of the model asks it, whatever the model (the
    run's partition check and the public set's, on its P^t and the rows a filter leaves, ask it alike)."""
    probe = copy.deepcopy(model).train()
    like = next((t for t in (*probe.parameters(), *probe.buffers())), None)  # the server's template may sit on the run's device
    try:
        with torch.no_grad(), forked_rng():
            probe(x[:1] if like is None else x[:1].to(like.device))
    except Exception as exc:  # noqa: BLE001 - any failure on one sample is what a run would meet mid-round
        return f"{type(model).__qualname__} cannot train on a batch of one sample ({type(exc).__name__}: {' '.join(str(exc).split())[:120]})"
    return None


def draw_public_subset(seed: int, round: int, num_public: int, size: int) -> torch.Tensor:
    """I^t: ``size`` distinct public indices, sorted, from a stream of (seed, round) only."""
    rng = np.random.default_rng(derive_seed(seed, "public-subset", round))
    return torch.from_numpy(np.sort(rng.choice(num_public, size=size, replace=False)).astype(np.int64))

"""A user's arrays checked before a run trains on them: shapes, lengths, label dtype and range, natural groups.

Two doors take a user's arrays: :func:`chillfl.run` (``chillfl.TensorData``, ``DatasetData``, an
``ArrayDataset``) and a dataset builder named in a config (``[dataset] name = "pkg.mod:build"``,
:func:`chillfl.data.datasets.user_dataset`). Both check them here, so that a float label or a stray
group index is one line naming what is wrong, not an IndexError in a client mid-run. Errors name
``<prefix>.<array>`` (``data.y_train``); the config door rewords them onto ``dataset.name``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from chillfl.errors import ConfigError


class CheckedArrays(NamedTuple):
    """The train and test arrays as CPU tensors (floating inputs in the dtype asked for, labels int64) and the class count."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int


def as_tensor(value: Any, field: str) -> torch.Tensor:
    """``value`` (a tensor or a NumPy array) as a CPU tensor; a ConfigError on ``field`` for anything else."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biufc":  # strings, bytes, objects, dates, records: torch.from_numpy's TypeError otherwise
            hint = " (class names: number them with np.unique(y, return_inverse=True)[1])" if field.rpartition(".")[2].startswith("y_") else ""
            raise ConfigError(field, f"must be a numeric array, got dtype {value.dtype}{hint}")
        return torch.from_numpy(np.ascontiguousarray(value))
    raise ConfigError(field, f"must be a torch.Tensor or a NumPy array, got {type(value).__name__}")


MAX_CLASSES = 10_000_000
"""The most classes a dataset may have: a head of one logit a class, and a partition's per-class pools, beyond it do not fit."""

SPARSE_CLASSES = 100_000
"""Labels whose max + 1 passes this and ten times their distinct values are ids, not class indices (:func:`check_class_count`)."""


def check_class_count(classes: int, distinct: int, field: str, explicit: str) -> None:
    """Refuse a class count taken from the largest label (``max + 1``) that is absurd for the labels seen: above
    :data:`SPARSE_CLASSES` and ten times the ``distinct`` values (a synset number, a 10**12 id). Why: every class
    gets a logit and a partition pool, so such ids ran out of memory or looped over 10**12 classes, without a word.
    ``explicit``: how the user would set a count on purpose (a gappy label set is fine then, within :data:`MAX_CLASSES`)."""
    if classes > SPARSE_CLASSES and classes > 10 * distinct:
        raise ConfigError(field, f"labels run to {classes - 1:,} but only {distinct:,} distinct values occur: number them 0..{distinct - 1} "
                                 f"(np.unique(y, return_inverse=True)[1]), or {explicit} if the gaps are classes")


def checked_arrays(x_train: Any, y_train: Any, x_test: Any, y_test: Any, num_classes: Any, dtype: torch.dtype, prefix: str = "data") -> CheckedArrays:
    """The four arrays checked; ``num_classes`` None: 1 + the largest label (at least 2). Errors name ``<prefix>.<array>``."""
    given = {"train": (x_train, y_train), "test": (x_test, y_test)}
    xs, ys = {}, {}
    for split, (x_value, y_value) in given.items():
        x, y = as_tensor(x_value, f"{prefix}.x_{split}"), as_tensor(y_value, f"{prefix}.y_{split}")
        if x.dim() < 2:
            raise ConfigError(f"{prefix}.x_{split}", f"must be [samples, ...features], got shape {tuple(x.shape)} (one feature: x.reshape(-1, 1))")
        if y.dim() != 1:
            raise ConfigError(f"{prefix}.y_{split}", f"must be a 1-D tensor of class indices, got shape {tuple(y.shape)}")
        if len(x) != len(y):
            raise ConfigError(f"{prefix}.y_{split}", f"has {len(y)} labels for {len(x)} inputs in x_{split}")
        if len(y) == 0:
            raise ConfigError(f"{prefix}.x_{split}", "is empty")
        if y.dtype == torch.bool or y.is_floating_point() or y.is_complex():
            raise ConfigError(f"{prefix}.y_{split}", f"must hold integer class indices, got dtype {y.dtype} (convert with y.long())")
        if x.is_floating_point():
            if not bool(torch.isfinite(x).all()):
                raise ConfigError(f"{prefix}.x_{split}", "contains NaN or infinite values")
            x = x.to(dtype)
        elif x.dtype == torch.bool or x.is_complex():
            raise ConfigError(f"{prefix}.x_{split}", f"must be real-valued, got dtype {x.dtype}")
        xs[split], ys[split] = x, y.to(torch.int64)
    if xs["test"].shape[1:] != xs["train"].shape[1:]:
        raise ConfigError(f"{prefix}.x_test", f"samples have shape {tuple(xs['test'].shape[1:])}, those of x_train {tuple(xs['train'].shape[1:])}")
    largest = int(max(ys["train"].max(), ys["test"].max()))
    if num_classes is None:
        where = "train" if int(ys["train"].max()) == largest else "test"
        check_class_count(largest + 1, int(torch.unique(torch.cat([ys["train"], ys["test"]])).numel()), f"{prefix}.y_{where}", "set num_classes")
    classes = num_classes if num_classes is not None else max(2, largest + 1)
    if isinstance(classes, bool) or not isinstance(classes, (int, np.integer)) or classes < 2:
        raise ConfigError(f"{prefix}.num_classes", f"must be an integer >= 2, got {classes!r}")
    if classes > MAX_CLASSES:
        raise ConfigError(f"{prefix}.num_classes", f"must be at most {MAX_CLASSES:,} (one logit a class), got {classes:,}")
    classes = int(classes)
    for split in ("train", "test"):
        low, high = int(ys[split].min()), int(ys[split].max())
        if low < 0 or high >= classes:
            raise ConfigError(f"{prefix}.y_{split}", f"labels must be in 0..{classes - 1} (num_classes = {classes}), found {low}..{high}")
    return CheckedArrays(xs["train"], ys["train"], xs["test"], ys["test"], classes)


def checked_groups(groups: Sequence[Any] | None, size: int, field: str, split: str = "test") -> tuple[np.ndarray, ...] | None:
    """Per-client index arrays into the ``split`` set of ``size`` rows (a dataset's natural groups, a client's own
    test rows), checked: a stray index would be an IndexError mid-run, a negative one another row."""
    if groups is None:
        return None
    if isinstance(groups, (str, bytes)) or not isinstance(groups, Sequence) or not groups:
        raise ConfigError(field, f"must be a list with one list of {split}-set indices per client")
    out = []
    for i, ix in enumerate(groups):
        try:
            arr = np.asarray(ix.cpu() if isinstance(ix, torch.Tensor) else ix)
        except (TypeError, ValueError):  # ragged or nested lists: NumPy cannot make one array of them
            arr = np.empty((0, 0))
        if arr.ndim != 1 or (arr.size and (arr.dtype.kind not in "iu" or int(arr.min()) < 0 or int(arr.max()) >= size)):
            raise ConfigError(field, f"client {i}: expected indices into the {split} set (0..{size - 1})")
        out.append(arr.astype(np.int64))
    return tuple(out)

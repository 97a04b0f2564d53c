"""A partition as a file: every run writes ``partition.json``; ``partition.from = "partition.json"`` reuses one.

The file holds each client's training indices in the dataset's own index
space (after nothing: the public pool, if any, is never in them), so another
run on the same dataset, or another tool, can train on exactly the same
clients. Reading checks the file against the run: the number of clients,
indices in range, no index twice, none in the public pool, and the rows.

Rows (format version 2): indices name rows, so the same indices on the same
dataset in another row order (another ``dataset.split_seed``, other data files)
are other samples, and the size alone cannot tell. The file records a digest
of the training labels in row order (SHA-256 of them as little-endian int64),
taken when the data were split, before an attack relabels any row, and the
``[dataset]`` table it was made with (to say what may have changed); reading
compares the digest. Files of version 1 have no such record and are read with
the other checks only.

Noise: a partition that adds Gaussian noise to each client's inputs
(``feature_noise``) keeps the clients' noise levels in a ``noise`` list, one
sigma per client, and a run reading the file applies them as the run that
wrote it did (the draws follow the reading run's seed, as the writer's follow
its own: the same seed gives the same training inputs, bit for bit). A file of
a partition that adds none has no such list, and its bytes are as before. A
file whose ``partition`` table names a partitioner that adds noise but which
has no list (written before the list was) is refused: read, it gave the same
rows without their noise, silently.

Checked against :mod:`chillfl.data.partition` (what a partition guarantees:
disjoint, in-range, sorted indices per client), 2026-12-02: every such
property a file could break is checked on reading, each as one ConfigError
naming ``partition.from``.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from chillfl.data.augment import AUGMENT_KEY
from chillfl.data.partition import PARTITIONERS, has_repeats, partitioner_options
from chillfl.errors import ConfigError, json_loads
from chillfl.numeric import is_finite_real, is_whole
from chillfl.options import short_path, short_repr
from chillfl.paths import PARTITION_FILE as PARTITION_FILE  # defined there (storage names it too); read here

FROM_FILE = "file"
"""``partition.name`` of a partition read from a file (set by ``partition.from`` alone)."""
FROM_KEY = "from"
FORMAT = "chillfl-partition"
FIELD = "partition.from"


VERSIONS = (1, 2)
"""The format versions this code reads (and writes: 2, or 1 for a dataset without labels to record)."""

ROWS = "rows"
"""The key of the row-order record (format version 2): ``labels_sha256`` and the ``dataset`` table."""

NOISE = "noise"
"""The key of the clients' input-noise levels (one sigma per client), only in the file of a partition that adds noise."""


@dataclass(frozen=True)
class FilePartition:
    """What a partition file hands a run: each client's training indices (sorted), and each client's input-noise sigma
    (None: the partition adds none), which the run applies as the run that wrote the file did."""

    clients: list[np.ndarray]
    noise: list[float] | None = None


def labels_digest(labels: np.ndarray) -> str:
    """SHA-256 of the labels in row order, as little-endian int64 (one pass; no copy when they are int64 already)."""
    return hashlib.sha256(np.ascontiguousarray(labels, dtype="<i8").data).hexdigest()


def partition_record(
    dataset: str, train_size: int, table: Mapping[str, Any], train_indices: Sequence[np.ndarray],
    *, row_labels: str | None = None, dataset_table: Mapping[str, Any] | None = None, noise: Sequence[float] | None = None,
) -> dict[str, Any]:
    """What ``partition.json`` holds: the dataset's name and size, how it was split, each client's indices, (given
    ``row_labels``, the labels' :func:`labels_digest` before any attack) the record of its rows, and (given ``noise``,
    the clients' input-noise sigmas of a partition that adds noise) those sigmas. Without ``noise`` the record has no
    such key: every other partition's file keeps its bytes."""
    record: dict[str, Any] = {
        "format": FORMAT,
        "version": 2 if row_labels is not None else 1,
        "dataset": dataset,
        "train_size": train_size,
        "partition": dict(table),
    }
    if row_labels is not None:
        made = {k: v for k, v in (dataset_table or {}).items() if k != AUGMENT_KEY}  # augmentation leaves rows where they are
        record[ROWS] = {"labels_sha256": row_labels, "dataset": made}
    if noise is not None:  # Python floats: JSON keeps each one exactly (repr), so a reading run applies the same sigma
        record[NOISE] = [float(s) for s in noise]
    record["clients"] = [np.asarray(ix, dtype=np.int64).tolist() for ix in train_indices]
    return record


def encode_partition(record: Mapping[str, Any]) -> bytes:
    """The bytes of ``partition.json`` (compact: one index list per client); the runner writes them atomically."""
    return (json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8")


def _relative_to(path: str) -> str:
    """For a relative path: where it was looked for. Why: a result folder's config.toml keeps ``partition.from`` as it was
    typed where that run started, and rerun from another folder it failed with a bare FileNotFoundError."""
    if os.path.isabs(path):
        return ""
    return (f" (a relative path is read from the folder the command runs in, {short_path(os.getcwd())}; a result folder's "
            "config.toml keeps it as typed in the folder its run started in: run from there, or give the absolute path)")


def read_partition(options: Mapping[str, Any], train_size: int, num_clients: int, public: np.ndarray, *, labels: np.ndarray | None = None) -> FilePartition:
    """Each client's training indices (and input-noise sigmas, if the partition adds noise) from the file
    ``options["from"]``, checked against this run.

    ``labels``: this run's training labels in row order (before any attack), compared with the file's record of its rows.
    """
    path, doc = _opened(options, num_clients)
    clients = doc["clients"]
    if doc.get("train_size") not in (None, train_size):
        raise ConfigError(FIELD, f"{short_path(path)} splits a training set of {doc['train_size']} samples; this dataset has {train_size}")
    if labels is not None:
        check_rows(doc.get(ROWS), labels, path)
    noise = read_noise(doc, num_clients, path)
    out = []
    for i, ix in enumerate(clients):
        if not isinstance(ix, list) or not all(is_whole(j) for j in ix):
            raise ConfigError(FIELD, f"client {i} in {short_path(path)} is not a list of integer indices")
        if ix and (min(ix) < 0 or max(ix) >= train_size):  # checked on Python ints: 2**70 does not fit an int64
            raise ConfigError(FIELD, f"indices in {short_path(path)} must be in [0, {train_size - 1}]")
        out.append(np.sort(np.asarray(ix, dtype=np.int64)))
    flat = np.concatenate(out) if out else np.zeros(0, dtype=np.int64)
    if not len(flat):
        raise ConfigError(FIELD, f"{short_path(path)} gives no client any training sample")
    if has_repeats(flat):
        raise ConfigError(FIELD, f"{short_path(path)} gives some training sample to two clients (or twice to one)")
    if len(public) and np.isin(flat, public).any():
        raise ConfigError(FIELD, f"{short_path(path)} gives clients samples of the public pool (distillation.public_size draws it first)")
    return FilePartition(out, noise)


def _opened(options: Mapping[str, Any], num_clients: int) -> tuple[str, dict[str, Any]]:
    """The file ``options["from"]`` names and its document, checked as far as no dataset is needed (readable, a chillfl
    partition file of a version this code reads, ``num_clients`` clients): :func:`read_partition`'s first checks, which
    :func:`check_file` asks alone."""
    extra = sorted(set(options) - {FROM_KEY})
    if extra:
        raise ConfigError(f"partition.{extra[0]}", f"unknown option of a partition read from a file; allowed: {FROM_KEY}")
    path = options.get(FROM_KEY)
    if not isinstance(path, str) or not path:
        raise ConfigError(FIELD, f"expected the path of a partition.json file, got {short_repr(path)}")
    try:
        # a device or FIFO (a link to /dev/zero) is refused before it is opened: read, it fills the memory or blocks forever
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigError(FIELD, f"{short_path(path)} is not a regular file (a run folder's {PARTITION_FILE})")
        doc = json_loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        said = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)[:120]  # an OSError's own text repeats the path
        where = _relative_to(path) if isinstance(exc, FileNotFoundError) else ""  # a file found and read is in the right folder
        raise ConfigError(FIELD, f"cannot read {short_path(path)}{where}: {type(exc).__name__}: {said}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("clients"), list):
        raise ConfigError(FIELD, f"{short_path(path)} is not a chillfl partition file (a run folder's {PARTITION_FILE})")
    version = doc.get("version", 1)  # a file another tool wrote may have none: read as version 1, the plain one
    if type(version) is not int or version not in VERSIONS:  # another format may give its indices another meaning
        raise ConfigError(FIELD, f"{short_path(path)} has format version {short_repr(version)}; this chillfl reads versions {', '.join(map(str, VERSIONS))}")
    if version >= 2 and ROWS not in doc:  # else the row-order check is skipped, as for version 1
        raise ConfigError(FIELD, f"{short_path(path)} is of version {version} but has no {ROWS!r} record (every such file has one)")
    if len(doc["clients"]) != num_clients:
        raise ConfigError(FIELD, f"{short_path(path)} has {len(doc['clients'])} clients; federation.num_clients is {num_clients}")
    return path, doc


def check_file(options: Mapping[str, Any], num_clients: int) -> None:
    """ConfigError (the line :func:`read_partition` gives) for a file it refuses whatever the dataset: unreadable, moved or
    deleted, no partition file, of other clients, or an older noisy one (:func:`read_noise`). Why: ``chillfl status`` asks it
    of a stopped run's ``partition.from``, which a resume reads again, without loading the dataset (it said "resumes", and
    resume refused the file)."""
    path, doc = _opened(options, num_clients)
    read_noise(doc, num_clients, path)


def read_noise(doc: Mapping[str, Any], num_clients: int, path: str) -> list[float] | None:
    """The file's per-client noise sigmas (None: it has none, and its partition adds none), checked.

    Why the check of the ``partition`` table: a file written before the ``noise`` list was, by a partition that adds
    noise, gave its rows without their noise (a feature-shift run silently turned IID). Only the built-in partitioners
    are looked up: a file's table must not import a module it names."""
    if NOISE not in doc:
        if _adds_noise(doc.get("partition"), num_clients):
            name = doc["partition"]["name"]
            raise ConfigError(
                FIELD,
                f"{short_path(path)} was made by partition.name = {name!r}, which adds noise to each client's inputs, but does not record "
                f"the clients' noise (a file written before chillfl recorded it): read, it would give the same rows without their noise. "
                f"Make the split again (run its [partition] table once more) for a file that records it; a run started on this file "
                f"before then trained without the noise and cannot go on as it began: start it again on the file made anew",
            )
        return None
    sigmas = doc[NOISE]
    if not isinstance(sigmas, list) or len(sigmas) != num_clients:
        got = f"a list of {len(sigmas)}" if isinstance(sigmas, list) else short_repr(sigmas)
        raise ConfigError(FIELD, f"{NOISE!r} in {short_path(path)} must be a list of one noise sigma per client ({num_clients}), got {got}")
    for i, sigma in enumerate(sigmas):  # an int past a float's range is finite as an int, infinite as the float it becomes
        if not is_finite_real(sigma) or not 0 <= sigma <= sys.float_info.max:
            raise ConfigError(FIELD, f"client {i}'s noise sigma in {short_path(path)} must be a finite number >= 0, got {short_repr(sigma)}")
    return [float(s) for s in sigmas]


def _adds_noise(table: object, num_clients: int) -> bool:
    """Whether the file's ``partition`` table names a built-in partitioner that, with its options over ``num_clients``
    clients, adds noise to the inputs (options this chillfl cannot parse: whether the partitioner ever does)."""
    if not isinstance(table, dict):
        return False
    name = table.get("name")
    if not isinstance(name, str):
        return False
    entry = PARTITIONERS.get(name)
    if entry is None or entry.adds_noise is None:
        return False
    try:
        options = partitioner_options(name, {k: v for k, v in table.items() if k != "name"})
    except ConfigError:
        return True
    return bool(entry.adds_noise(options, num_clients))


def check_rows(rows: object, labels: np.ndarray, path: str) -> None:
    """The file's record of its rows (None: a version 1 file, which has none) against this run's ``labels``."""
    if rows is None:
        return
    if not isinstance(rows, dict) or not isinstance(rows.get("labels_sha256"), str):
        raise ConfigError(FIELD, f"{short_path(path)}'s {ROWS!r} record is not one chillfl writes (labels_sha256 and dataset)")
    if rows["labels_sha256"] == labels_digest(labels):
        return
    made = rows.get("dataset")
    table = ", ".join(f"{k} = {short_repr(v)}" for k, v in sorted(made.items())) if isinstance(made, dict) and made else "unknown"
    raise ConfigError(
        FIELD,
        f"{short_path(path)} indexes rows in another order: this dataset's training labels differ row by row from those it was made on "
        f"([dataset] {table}); another dataset.split_seed (or another [dataset] option, or other data files) reorders the rows. "
        "Use the [dataset] table it was made with, or split anew",
    )

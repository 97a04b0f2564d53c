"""Decoded datasets stored once under ``data_dir`` as ``.npy`` files and memory-mapped.

Why: Tiny-ImageNet, Caltech-256 and FEMNIST take minutes to decode (JPEGs,
LEAF's JSON) and their standardised float32 arrays are gigabytes. They are
decoded once, standardised in chunks straight into ``.npy`` files, and every
later run maps those files (``np.load(mmap_mode="c")``): the tensors share the
page cache, clients index into them, and nothing is copied per client.

Layout: ``data_dir/.chillfl-cache/<name>-<key>/`` with ``x_train.npy``,
``y_train.npy``, ``x_test.npy``, ``y_test.npy``, optional ``train_bounds.npy`` /
``test_bounds.npy`` (the natural groups as contiguous ranges) and ``meta.json``
written last; the folder is built beside its final name and renamed into place,
so a half-written cache is never read. ``<key>`` hashes the cache layout
(:data:`FORMAT_VERSION`), the loader's output version, the options and a
fingerprint of the source folder (every file's path, size and mtime): changed
source files or options build a new cache. Delete ``.chillfl-cache`` to reclaim
the space.

Versions: the cached arrays are a loader's output, so a fixed loader must not
be served what its buggy predecessor wrote. Each caching loader declares its
output version beside its code (``loaders.FEMNIST_OUTPUT``,
``loaders.TINY_IMAGENET_OUTPUT``, ``loaders.CALTECH256_OUTPUT``,
``leaf_hub.FLWR_FEMNIST_OUTPUT``) and passes it to :func:`cached`: bump it in
the commit that changes what the loader produces (pixels, labels, order,
groups, split). Bump :data:`FORMAT_VERSION` when this module changes what it
writes (files, standardisation). Either way old entries get another key and
are rebuilt, never read, and the new entry's writer removes them (:func:`remove_superseded`).

Superseded entries: ``meta.json`` records what an entry is of (its ``lineage``: the name, options and source
fingerprint, without the versions) and the versions that wrote it. Once a loader has written its new entry,
the entries of the same lineage with older versions are removed; an entry of a newer version (a newer chillfl
beside this one), of other options or source files, a hidden folder of an unfinished build, and an entry that
records no lineage (written before they did) are never touched. Entries an older chillfl keyed by its older
source fingerprint (:data:`FINGERPRINT_VERSION`: one key for every single file, linked subfolders not walked) are
never read again either, whatever their versions: the sweep computes that older fingerprint of the same source
(:func:`legacy_fingerprint`) and removes the entries of its lineage which record no newer fingerprint. An entry is
removed only when its folder's name is the key its record gives (a copy or a folder of the user's is not one) and
it holds nothing but the cache's own files (:data:`ENTRY_FILES`). A reader holds a shared ``flock`` on the
entry's folder while it maps it, and the sweep removes only an entry it can lock alone (its ``meta.json``
first, so that no reader starts on a half-removed entry); once mapped, arrays stay readable after their files
are removed (POSIX keeps an unlinked file's pages while a map holds them).

Choices
-------
* ``mmap_mode="c"`` (copy-on-write), not ``"r"``: torch needs a writable array,
  and an in-place write through a read-only map would crash the process; with
  ``"c"`` a write stays private to the process and the file is never changed.
* Standardisation is per channel with the train set's float64 mean and std,
  accumulated chunk by chunk (two passes), so memory stays at one chunk.
* A ``data_dir`` that cannot be written falls back to building in memory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypedDict

import numpy as np
import torch

from chillfl.errors import ConfigError, StorageError, json_loads
from chillfl.numeric import is_real
from chillfl.paths import make_temp_dir
from chillfl.storage.checkpoint import write_atomic
from chillfl.storage.owned_temp import remove_unlocked
from chillfl.storage.results import LocksUnsupported, RunLock

log = logging.getLogger(__name__)

CACHE_DIR = ".chillfl-cache"
FORMAT_VERSION = 2
"""The cache's own layout and standardisation: bump when this module changes what it writes (it is in every key).
2: ``meta.json`` records the per-channel ``channel_mean`` / ``channel_std`` the arrays were standardised with."""
FINGERPRINT_VERSION = 2
"""How :func:`fingerprint` keys a source, recorded in ``meta.json`` as ``fingerprint`` (the sweep's question: which key
scheme wrote this entry?). 1 (not recorded): :func:`legacy_fingerprint`; 2: a single file by its name, size and
mtime, linked subfolders walked, a dangling link by its target."""
CHUNK_ROWS = 4096
ENTRY_FILES = frozenset({"meta.json", "meta.json.tmp", "x_train.npy", "y_train.npy", "x_test.npy", "y_test.npy", "train_bounds.npy", "test_bounds.npy"})
"""Every file :func:`_write` and :func:`_record` leave in an entry: a folder holding anything else is not removed whole."""


class Decoded(NamedTuple):
    """A reader's output: unnormalised arrays (uint8 images are scaled by 1/255) and optional natural groups."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    train_bounds: np.ndarray | None = None
    test_bounds: np.ndarray | None = None
    """Group g is rows ``bounds[g]:bounds[g + 1]`` (len = groups + 1)."""
    indices: bool = False
    """True: the inputs are indices (Shakespeare's characters), stored as float32 values as they are: neither scaled
    by 1/255 nor standardised, and no channel statistics recorded (there are none to undo)."""


class Mapped(NamedTuple):
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    train_bounds: np.ndarray | None
    test_bounds: np.ndarray | None
    channel_mean: tuple[float, ...] | None = None
    """The per-channel standardisation x = (raw - mean) / std of the arrays (raw: uint8 / 255); None: not recorded."""
    channel_std: tuple[float, ...] | None = None


def fingerprint(folder: Path) -> str:
    """sha256 over every file's relative path, size and mtime under ``folder``.

    Hidden entries (``.chillfl-cache``, ``.downloads``, the download marker) are
    skipped, so a source folder that is ``data_dir`` itself keeps its key. Linked
    subfolders are walked (each real folder once), as the readers follow them: a
    changed file under ``part -> /other/disk`` was served the old arrays; a dangling
    link is keyed by where it points (its ``stat`` was a traceback).
    """
    h = hashlib.sha256()
    if folder.is_file():  # a single source file (``shakespeare.csv``): os.walk gives nothing, so every file had one key
        st = folder.stat()
        h.update(f"{folder.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()
    seen = {os.path.realpath(folder)}  # a linked folder walked once: a link back up would loop
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        kept = []
        for d in sorted(d for d in dirnames if not d.startswith(".")):
            real = os.path.realpath(os.path.join(dirpath, d))
            if real not in seen:
                seen.add(real)
                kept.append(d)
        dirnames[:] = kept
        for name in sorted(f for f in filenames if not f.startswith(".")):
            path = Path(dirpath) / name
            try:
                st = path.stat()
            except OSError:  # a dangling link (a README.md pointing nowhere), or one pointing at itself (ELOOP): its target's text keys it
                if not path.is_symlink():
                    raise
                h.update(f"{path.relative_to(folder).as_posix()}\0->{os.readlink(path)}\n".encode())
                continue
            h.update(f"{path.relative_to(folder).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def legacy_fingerprint(source: Path) -> str | None:
    """The fingerprint chillfl gave ``source`` before :data:`FINGERPRINT_VERSION` 2, or None where that code wrote no entry.

    Why kept: an entry keyed by it is never read again (keys hold :func:`fingerprint`), and only this older fingerprint
    of the same source tells the sweep that such an entry is this source's. It walked without following links (files
    under a linked subfolder unseen; a single file yielded nothing, so every file had the empty hash), and a dangling
    link raised (None: no entry was written).
    """
    h = hashlib.sha256()
    try:
        for dirpath, dirnames, filenames in os.walk(source):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(f for f in filenames if not f.startswith(".")):
                path = Path(dirpath) / name
                st = path.stat()
                h.update(f"{path.relative_to(source).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    except OSError:
        return None
    return h.hexdigest()


def _key(versions: list[int], name: str, options: object, prints: str) -> str:
    """An entry's key (its folder is ``<name>-<key>``): the cache layout and loader output ``versions``, and its lineage."""
    return hashlib.sha256(f"{versions[0]}\0{versions[1]}\0{name}\0{options!r}\0{prints}".encode()).hexdigest()[:16]


def _lineage(name: str, options: object, prints: str) -> str:
    """What an entry is of: its key without the versions."""
    return hashlib.sha256(f"{name}\0{options!r}\0{prints}".encode()).hexdigest()[:16]


def _scale(x: np.ndarray) -> float:
    return 255.0 if x.dtype == np.uint8 else 1.0


def channel_stats(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (axis 1) mean and std of ``x / scale`` in float64, one chunk of rows at a time."""
    scale = _scale(x)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    count = x.size / x.shape[1]
    total = np.zeros(shape)
    for start in range(0, len(x), CHUNK_ROWS):
        total += (x[start : start + CHUNK_ROWS].astype(np.float64) / scale).sum(axis=axes, keepdims=True)
    mean = total / count
    sq = np.zeros(shape)
    for start in range(0, len(x), CHUNK_ROWS):
        sq += ((x[start : start + CHUNK_ROWS].astype(np.float64) / scale - mean) ** 2).sum(axis=axes, keepdims=True)
    return mean, np.sqrt(sq / count)


def recorded_stats(mean: np.ndarray, std: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The (mean, std) per channel that :func:`standardise_into` applies (float32, a zero std read as 1), as floats."""
    return tuple(float(v) for v in mean.astype(np.float32).ravel()), tuple(float(v) for v in np.where(std > 0, std, 1.0).astype(np.float32).ravel())


def standardise_into(x: np.ndarray, mean: np.ndarray, std: np.ndarray, out: np.ndarray) -> None:
    """``out = (x / scale - mean) / std`` as float32, chunk by chunk."""
    scale = np.float32(_scale(x))
    mean32 = mean.astype(np.float32)
    std32 = np.where(std > 0, std, 1.0).astype(np.float32)
    for start in range(0, len(x), CHUNK_ROWS):
        out[start : start + CHUNK_ROWS] = (x[start : start + CHUNK_ROWS].astype(np.float32) / scale - mean32) / std32


class EntryRecord(TypedDict):
    """What an entry's ``meta.json`` records of where it comes from: the versions that wrote it and its lineage (the key
    without the versions), which :func:`remove_superseded` reads to find the entries a newer version supersedes."""

    format: int
    output: int
    lineage: str
    fingerprint: int
    """:data:`FINGERPRINT_VERSION` of the ``lineage``: an entry without it was keyed by :func:`legacy_fingerprint`."""


def copy_into(x: np.ndarray, out: np.ndarray) -> None:
    """``out = x`` as float32, chunk by chunk: the stored form of :attr:`Decoded.indices` inputs."""
    for start in range(0, len(x), CHUNK_ROWS):
        out[start : start + CHUNK_ROWS] = x[start : start + CHUNK_ROWS]


Stats = tuple[tuple[float, ...], tuple[float, ...]]


def _filler(decoded: Decoded) -> tuple[Callable[[np.ndarray, np.ndarray], None], Stats | None]:
    """How ``decoded``'s inputs are stored (standardised, or :attr:`Decoded.indices` as they are) and the recorded stats."""
    if decoded.indices:
        return copy_into, None
    mean, std = channel_stats(decoded.x_train)
    return (lambda x, out: standardise_into(x, mean, std, out)), recorded_stats(mean, std)


def _write(folder: Path, decoded: Decoded, record: EntryRecord) -> None:
    fill, stats = _filler(decoded)
    for split, x, y in (("train", decoded.x_train, decoded.y_train), ("test", decoded.x_test, decoded.y_test)):
        out = np.lib.format.open_memmap(folder / f"x_{split}.npy", mode="w+", dtype=np.float32, shape=x.shape)
        fill(x, out)
        out.flush()
        del out
        np.save(folder / f"y_{split}.npy", np.asarray(y, dtype=np.int64))
    for split, bounds in (("train", decoded.train_bounds), ("test", decoded.test_bounds)):
        if bounds is not None:
            np.save(folder / f"{split}_bounds.npy", np.asarray(bounds, dtype=np.int64))
    recorded = {} if stats is None else {"channel_mean": list(stats[0]), "channel_std": list(stats[1])}
    meta = {**record, "num_classes": decoded.num_classes, **recorded}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def _in_memory(decoded: Decoded) -> Mapped:
    fill, stats = _filler(decoded)
    xs = []
    for x in (decoded.x_train, decoded.x_test):
        out = np.empty(x.shape, dtype=np.float32)
        fill(x, out)
        xs.append(torch.from_numpy(out))
    y = [torch.from_numpy(np.asarray(a, dtype=np.int64)) for a in (decoded.y_train, decoded.y_test)]
    mean, std = (None, None) if stats is None else stats
    return Mapped(xs[0], y[0], xs[1], y[1], decoded.num_classes, decoded.train_bounds, decoded.test_bounds, mean, std)


def _array(path: Path, dtype: type, mmap: bool = False) -> np.ndarray:
    """``path``'s array, which must have ``dtype``: pickles are never loaded (no code runs), a wrong file is a ValueError."""
    arr = np.load(path, mmap_mode="c" if mmap else None, allow_pickle=False)
    if not isinstance(arr, np.ndarray) or arr.dtype != dtype:
        raise ValueError(f"{path.name} holds {getattr(arr, 'dtype', type(arr).__name__)}, not {np.dtype(dtype)}")
    return arr


def _read(folder: Path, record: EntryRecord) -> Mapped | None:
    """The entry's arrays, read holding its shared lock (:func:`remove_superseded` takes no entry a reader holds);
    None when it is gone or being removed (a miss: the caller builds it).

    An entry written before entries recorded their lineage (or its fingerprint's version) gets ``record`` in its
    ``meta.json`` (this key is that record's), so that the sweep of a later version knows it: else it would stay
    on disk for good.
    """
    if not (folder / "meta.json").is_file():
        return None
    lock: RunLock | None
    try:
        lock = RunLock(folder, field="data_dir", shared=True)
    except LocksUnsupported:  # a data folder on NFS without its lock service: read unlocked, not a miss every run (a rebuild)
        lock = None
    except ConfigError:  # removed meanwhile, or its remover holds it
        return None
    try:
        if not (folder / "meta.json").is_file():
            return None
        mapped = _load(folder)
        _record(folder, record)
        return mapped
    finally:
        if lock is not None:
            lock.release()


def _record(folder: Path, record: EntryRecord) -> None:
    """Add ``record`` to an entry's ``meta.json`` that lacks part of it (atomically; a read-only cache keeps it as it is)."""
    path = folder / "meta.json"
    try:
        meta = json_loads(path.read_text(encoding="utf-8"))
        if any(k not in meta for k in record):
            write_atomic(path, json.dumps({**meta, **record}).encode("utf-8"))
    except (OSError, ValueError, TypeError, StorageError):
        pass


def _load(folder: Path) -> Mapped:
    """The cached arrays; a damaged or foreign cache (an object-dtype ``.npy``, a torn file) is one ConfigError."""
    try:
        meta: dict[str, Any] = json_loads((folder / "meta.json").read_text(encoding="utf-8"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns that the copy-on-write map is not writable
            xs = [torch.from_numpy(_array(folder / f"x_{split}.npy", np.float32, mmap=True)) for split in ("train", "test")]
        ys = [torch.from_numpy(_array(folder / f"y_{split}.npy", np.int64)) for split in ("train", "test")]
        bounds = [_array(p, np.int64) if (p := folder / f"{split}_bounds.npy").is_file() else None for split in ("train", "test")]
        classes = int(meta["num_classes"])
        for split, x, y, b in zip(("train", "test"), xs, ys, bounds):  # a file replaced by hand, or from another build
            if len(x) != len(y) or (len(y) and (int(y.min()) < 0 or int(y.max()) >= classes)):
                raise ValueError(f"{split}: {len(x)} inputs, {len(y)} labels, which must be in 0..{classes - 1}")
            if b is not None and (b.ndim != 1 or len(b) < 1 or b[0] != 0 or b[-1] != len(y) or (np.diff(b) < 0).any()):
                raise ValueError(f"{split}_bounds.npy does not cut the {len(y)} rows into client blocks")
        mean, std = _stats(meta, xs[0].shape[1] if xs[0].dim() > 1 else 0)
        return Mapped(xs[0], ys[0], xs[1], ys[1], classes, bounds[0], bounds[1], mean, std)
    except (OSError, ValueError, KeyError, TypeError, EOFError) as exc:
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        raise ConfigError("data_dir", f"the cached arrays in {folder} are unreadable ({reason}); delete that folder to rebuild them") from None


def _stats(meta: dict[str, Any], channels: int) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """``meta.json``'s recorded standardisation, or (None, None) where it holds none that fits ``channels``."""
    mean, std = meta.get("channel_mean"), meta.get("channel_std")
    if not (isinstance(mean, list) and isinstance(std, list) and len(mean) == len(std) == channels):
        return None, None
    if not all(is_real(v) for v in [*mean, *std]) or not all(v > 0 for v in std):
        return None, None
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)


def cached(name: str, options: object, source: Path, data_dir: Path, decode: Callable[[], Decoded], *, output_version: int) -> Mapped:
    """The standardised arrays of ``name``: mapped from the cache, or decoded, written once and mapped.

    ``output_version``: the loader's (``decode``'s) output version, part of the key, so that an entry an older
    loader wrote is rebuilt rather than served (see the module docstring).
    """
    prints = fingerprint(source)
    versions = [FORMAT_VERSION, output_version]
    record = EntryRecord(format=FORMAT_VERSION, output=output_version, lineage=_lineage(name, options, prints), fingerprint=FINGERPRINT_VERSION)
    cache_root = data_dir / CACHE_DIR
    folder = cache_root / f"{name}-{_key(versions, name, options, prints)}"
    found = _read(folder, record)
    if found is not None:
        return found
    decoded = decode()
    for y, part in ((decoded.y_train, "train"), (decoded.y_test, "test")):
        if len(y) == 0:  # refused here, before the entry is written: a run that is refused leaves no cache behind
            raise ConfigError("data_dir", f"{name} {part} split is empty: missing or corrupt files?")
    try:
        cache_root.mkdir(parents=True, exist_ok=True)
        tmp = make_temp_dir(f".{name}-", cache_root)  # renamed into place: a plain folder's permissions
    except OSError as exc:
        log.info("cannot cache %s under %s (%s); keeping it in memory", name, cache_root, exc.strerror or exc)
        return _in_memory(decoded)
    try:
        _write(tmp, decoded, record)
        del decoded
        try:
            tmp.replace(folder)
        except OSError:
            if not (folder / "meta.json").is_file():  # not a concurrent writer that finished first
                raise
    except OSError as exc:
        log.warning("cannot write the %s cache under %s (%s); decoding again in memory", name, cache_root, exc.strerror or exc)
        return _in_memory(decode())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    remove_superseded(cache_root, name, options, prints, versions, legacy_fingerprint(source))
    found = _read(folder, record)
    return found if found is not None else _in_memory(decode())  # removed meanwhile by a newer chillfl's sweep


def remove_superseded(cache_root: Path, name: str, options: object, prints: str, versions: list[int], legacy: str | None = None) -> None:
    """Remove the entries ``name-*`` that this source and ``options`` superseded (see the module docstring): those of
    its lineage written by older ``[format, output]`` ``versions``, and, where ``legacy`` (:func:`legacy_fingerprint`)
    differs from ``prints``, those an older chillfl keyed by it (no newer fingerprint recorded, no newer versions).

    Each is removed only while this process holds its exclusive lock, which no reader holds then; one a reader
    holds stays for a later sweep. A folder that cannot be read or locked, whose name is not the key its record
    gives, or which holds a file the cache does not write, is left as it is.
    """
    try:
        entries = [e for e in os.scandir(cache_root) if e.name.startswith(f"{name}-") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return
    lineages = {_lineage(name, options, prints): prints}
    if legacy is not None and legacy != prints:
        lineages[_lineage(name, options, legacy)] = legacy
    for entry in entries:
        try:
            meta = json_loads(Path(entry.path, "meta.json").read_text(encoding="utf-8"))
            recorded = [int(meta["format"]), int(meta["output"])]
            keyed_by = lineages.get(meta["lineage"])
            scheme = int(meta.get("fingerprint", 1))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue  # unfinished, damaged, or written before entries recorded their lineage: not known to be this one's
        if keyed_by == prints:
            why, superseded = "an older loader wrote", recorded < versions
        else:  # an older fingerprint of this source: never read again, unless a newer chillfl wrote it
            why, superseded = "an older chillfl keyed by its older source fingerprint", keyed_by is not None and scheme < FINGERPRINT_VERSION and recorded <= versions
        if not superseded or keyed_by is None or entry.name != f"{name}-{_key(recorded, name, options, keyed_by)}" or not _only_entry_files(Path(entry.path)):
            continue
        if remove_unlocked(Path(entry.path), first="meta.json"):
            log.info("removed the %s cache entry %s, which %s", name, entry.name, why)


def _only_entry_files(folder: Path) -> bool:
    """Whether ``folder`` holds plain files of :data:`ENTRY_FILES` alone: one that holds a user's file is not removed whole."""
    try:
        return all(e.name in ENTRY_FILES and e.is_file(follow_symlinks=False) for e in os.scandir(folder))
    except OSError:
        return False

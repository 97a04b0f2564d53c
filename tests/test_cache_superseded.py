"""A loader's new cache entry removes the entries it supersedes: the same dataset, options and source files, written
by an older version of that loader (or of the cache's layout). Nothing else in ``.chillfl-cache`` is touched.

Before, bumping a loader's output version (``loaders.FEMNIST_OUTPUT`` ...) made every run rebuild its entry, and the
old one (gigabytes for Tiny-ImageNet) stayed on disk, never read again.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import chillfl.data.arraycache as arraycache
from chillfl.data.arraycache import CACHE_DIR, Decoded, cached
from chillfl.storage.results import RunLock


def _decoded(rows: int = 6) -> Decoded:
    rng = np.random.default_rng(rows)
    return Decoded(rng.random((rows, 1, 2, 2)).astype(np.float32), np.arange(rows) % 2, rng.random((4, 1, 2, 2)).astype(np.float32), np.arange(4) % 2, 2)


def _source(tmp_path: Path, name: str = "src") -> Path:
    source = tmp_path / name
    if not source.is_dir():  # once: its fingerprint (sizes, mtimes) is part of what an entry is of
        source.mkdir()
        (source / "data.bin").write_bytes(name.encode())
    return source


def _entries(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / CACHE_DIR).iterdir()}


def _write(tmp_path: Path, name: str = "toy", options: object = None, version: int = 1, source: str = "src", rows: int = 6) -> str:
    """The entry ``cached`` writes (or finds) for these, by folder name."""
    before = _entries(tmp_path) if (tmp_path / CACHE_DIR).is_dir() else set()
    cached(name, options or {}, _source(tmp_path, source), tmp_path, lambda: _decoded(rows), output_version=version)
    made = _entries(tmp_path) - before
    return made.pop() if made else ""


def test_a_newer_loader_version_removes_the_entry_it_supersedes_and_nothing_else(tmp_path: Path) -> None:
    old = _write(tmp_path, version=1)
    other_options = _write(tmp_path, options={"split": 2}, version=1)  # the same loader, other options: another dataset
    other_name = _write(tmp_path, name="other", version=1)
    other_source = _write(tmp_path, source="src2", version=1)  # other source files: kept (their own entry)
    unfinished = tmp_path / CACHE_DIR / ".toy-leftover"  # a build killed midway: not this sweep's
    unfinished.mkdir()
    new = _write(tmp_path, version=2, rows=8)
    assert new and old not in _entries(tmp_path)
    assert _entries(tmp_path) == {new, other_options, other_name, other_source, unfinished.name}
    assert len(cached("toy", {}, _source(tmp_path), tmp_path, lambda: _decoded(99), output_version=2).y_train) == 8  # the new one is served


def test_an_entry_of_a_newer_version_or_without_a_record_is_kept(tmp_path: Path) -> None:
    """An older chillfl beside a newer one never removes the newer one's entry; one written before entries recorded
    what they are of (no ``lineage`` in ``meta.json``) cannot be told apart from another dataset's, and is kept."""
    newer = _write(tmp_path, version=3)
    unrecorded = _write(tmp_path, version=1, rows=7)
    meta = tmp_path / CACHE_DIR / unrecorded / "meta.json"
    record = json.loads(meta.read_text())
    meta.write_text(json.dumps({"format": record["format"], "num_classes": record["num_classes"]}))
    made = _write(tmp_path, version=2)
    assert _entries(tmp_path) == {newer, unrecorded, made}


def test_an_entry_a_process_is_reading_is_kept(tmp_path: Path) -> None:
    """A reader holds a shared lock on the entry while it maps it; the sweep takes no entry it cannot lock alone."""
    old = _write(tmp_path, version=1)
    reading = RunLock(tmp_path / CACHE_DIR / old, shared=True)
    try:
        made = _write(tmp_path, version=2)
    finally:
        reading.release()
    assert _entries(tmp_path) == {old, made}


def test_a_reader_holds_the_entry_while_it_maps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / CACHE_DIR / _write(tmp_path, version=1)
    held: list[bool] = []
    array = arraycache._array

    def probing(path: Path, dtype: type, mmap: bool = False) -> np.ndarray:
        try:
            RunLock(folder).release()  # an exclusive lock: what the sweep takes before it removes an entry
            held.append(False)
        except Exception:  # noqa: BLE001 - FolderInUse: the reader's shared lock
            held.append(True)
        return array(path, dtype, mmap)

    monkeypatch.setattr(arraycache, "_array", probing)
    cached("toy", {}, _source(tmp_path), tmp_path, lambda: _decoded(), output_version=1)
    assert held and all(held), held


def test_an_entry_written_before_entries_recorded_their_lineage_is_recorded_when_read(tmp_path: Path) -> None:
    """This chillfl's own versions wrote it (the key is the same), so the next version's sweep removes it too."""
    old = _write(tmp_path, version=1)
    meta = tmp_path / CACHE_DIR / old / "meta.json"
    meta.write_text(json.dumps({"format": arraycache.FORMAT_VERSION, "num_classes": 2}))  # as entries were written before
    cached("toy", {}, _source(tmp_path), tmp_path, lambda: _decoded(99), output_version=1)  # served, and recorded
    assert json.loads(meta.read_text())["output"] == 1 and not (tmp_path / CACHE_DIR / old / "meta.json.tmp").exists()
    made = _write(tmp_path, version=2)
    assert _entries(tmp_path) == {made}

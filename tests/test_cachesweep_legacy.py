"""The data cache's sweep removes the entries an older chillfl keyed by its older source fingerprint, which the current
code never reads: a source that is one file (every file had the empty hash, 5ce1b686 gave it a fingerprint) and a
source with a linked subfolder (not walked before 4caa1c2b). Before, they stayed on disk for good: their lineage is
not the current one, so the sweep of superseded versions never matched them.

Never removed: an entry the current code wrote (it records ``fingerprint``), one of a newer version, a folder whose
name is not the key its record gives (a copy), one holding a file the cache does not write, a user's file.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

from chillfl.data.arraycache import CACHE_DIR, Decoded, cached

OPTIONS = {"split": 1}
EMPTY = hashlib.sha256().hexdigest()
"""What the older fingerprint gave any single file (``os.walk`` of a file yields nothing)."""


def _decoded() -> Decoded:
    x = np.arange(24, dtype=np.float32).reshape(6, 1, 2, 2)
    return Decoded(x, np.arange(6) % 2, x[:4] + 1, np.arange(4) % 2, 2)


def old_prints(folder: Path) -> str:
    """The fingerprint as the code before 5ce1b686 wrote it (``git log -p -- src/chillfl/data/arraycache.py``)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(f for f in filenames if not f.startswith(".")):
            path = Path(dirpath) / name
            st = path.stat()
            h.update(f"{path.relative_to(folder).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def old_entry(data_dir: Path, name: str, prints: str, output: int = 1, fmt: int = 2) -> Path:
    """An entry as the older code wrote it: ``<name>-<key>`` with ``key = sha256(format, output, name, options, prints)``,
    the four arrays and a ``meta.json`` of format, output, lineage (no ``fingerprint``), num_classes and the stats."""
    key = hashlib.sha256(f"{fmt}\0{output}\0{name}\0{OPTIONS!r}\0{prints}".encode()).hexdigest()[:16]
    lineage = hashlib.sha256(f"{name}\0{OPTIONS!r}\0{prints}".encode()).hexdigest()[:16]
    folder = data_dir / CACHE_DIR / f"{name}-{key}"
    folder.mkdir(parents=True)
    for split, rows in (("train", 3), ("test", 2)):
        np.save(folder / f"x_{split}.npy", np.zeros((rows, 1, 2, 2), np.float32))
        np.save(folder / f"y_{split}.npy", np.arange(rows, dtype=np.int64) % 2)
    meta = {"format": fmt, "output": output, "lineage": lineage, "num_classes": 2, "channel_mean": [0.5], "channel_std": [0.25]}
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def _entries(data_dir: Path) -> set[str]:
    return {p.name for p in (data_dir / CACHE_DIR).iterdir()}


def _load(data_dir: Path, source: Path, name: str = "toy", output: int = 1) -> set[str]:
    """The entries ``cached`` added."""
    before = _entries(data_dir) if (data_dir / CACHE_DIR).is_dir() else set()
    cached(name, OPTIONS, source, data_dir, _decoded, output_version=output)
    return _entries(data_dir) - before


def test_an_old_single_file_entry_is_removed_and_nothing_else(tmp_path: Path) -> None:
    source = tmp_path / "shakespeare.csv"
    source.write_text("character_id,x,y\n")
    stale = old_entry(tmp_path, "toy", EMPTY)
    older_output = old_entry(tmp_path, "toy", EMPTY, output=0)  # older versions of that old key: never read either
    other_name = old_entry(tmp_path, "other", EMPTY)  # another dataset's: its own loader sweeps it
    newer = old_entry(tmp_path, "toy", EMPTY, output=5)  # a newer loader's (a chillfl beside this one): kept
    mine = tmp_path / CACHE_DIR / "toy-notes.txt"
    mine.write_text("the user's file\n")
    made = _load(tmp_path, source)
    assert len(made) == 1
    assert _entries(tmp_path) == made | {other_name.name, newer.name, mine.name}
    assert not stale.exists() and not older_output.exists()
    assert "fingerprint" in json.loads((tmp_path / CACHE_DIR / made.pop() / "meta.json").read_text())  # what tells the next sweep it is current


def test_an_old_entry_of_a_source_with_a_linked_subfolder_is_removed(tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "b.csv").write_text("2\n")
    source = tmp_path / "source"
    source.mkdir()
    (source / "a.csv").write_text("1\n")
    (source / "part").symlink_to(other, target_is_directory=True)
    stale = old_entry(tmp_path, "toy", old_prints(source))
    made = _load(tmp_path, source)
    assert _entries(tmp_path) == made and not stale.exists()


def test_a_copy_and_a_folder_holding_a_users_file_are_kept(tmp_path: Path) -> None:
    """Only the folder the older code named by its record's key, holding the cache's files alone, is removed."""
    source = tmp_path / "data.parquet"
    source.write_bytes(b"PAR1")
    holding = old_entry(tmp_path, "toy", EMPTY)
    (holding / "README.txt").write_text("kept\n")
    copy = old_entry(tmp_path, "toy", EMPTY, output=0)
    copy = copy.rename(copy.with_name("toy-backup"))
    made = _load(tmp_path, source)
    assert _entries(tmp_path) == made | {holding.name, copy.name}
    assert (holding / "README.txt").read_text() == "kept\n" and (copy / "meta.json").is_file()


def test_an_old_entry_holding_a_link_named_as_a_cache_file_is_kept(tmp_path: Path) -> None:
    """A link named ``x_test.npy`` is no file the cache wrote: the folder it stands in may be a user's, and is kept."""
    source = tmp_path / "data.parquet"
    source.write_bytes(b"PAR1")
    holding = old_entry(tmp_path, "toy", EMPTY)
    mine = tmp_path / "mine.npy"
    mine.write_bytes(b"the user's array")
    os.remove(holding / "x_test.npy")
    (holding / "x_test.npy").symlink_to(mine)
    made = _load(tmp_path, source)
    assert _entries(tmp_path) == made | {holding.name}
    assert (holding / "x_test.npy").is_symlink() and mine.read_bytes() == b"the user's array"


def test_an_entry_the_current_code_wrote_is_kept_though_its_lineage_is_an_old_one(tmp_path: Path) -> None:
    """Folder b's current fingerprint is folder a's older one (the same file, size and mtime; a's link unseen then): b's
    entry, written now, records its fingerprint version and is never taken for a's old one."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "c.csv").write_text("3\n")
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "x.csv").write_text("1\n")
    st = (a / "x.csv").stat()
    os.utime(b / "x.csv", ns=(st.st_atime_ns, st.st_mtime_ns))
    (a / "part").symlink_to(other, target_is_directory=True)
    assert old_prints(a) == old_prints(b)
    b_entry = _load(tmp_path, b)
    a_entry = _load(tmp_path, a)
    assert _entries(tmp_path) == b_entry | a_entry and len(b_entry) == len(a_entry) == 1


def test_an_old_entry_the_current_code_reads_is_served_and_recorded(tmp_path: Path) -> None:
    """A plain folder kept its fingerprint: the older code's entry is this code's, read and given its fingerprint version."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "a.csv").write_text("1\n")
    entry = old_entry(tmp_path, "toy", old_prints(source))
    assert not _load(tmp_path, source) and _entries(tmp_path) == {entry.name}
    assert "fingerprint" in json.loads((entry / "meta.json").read_text())

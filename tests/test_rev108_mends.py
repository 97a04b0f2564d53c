"""Mends from the review of 2026-12-07's merges (report-rev108): the flat-folder idx owner test does not guess, every
out-of-memory note of a round is removed, and the tar fallback clears execute bits as the "data" filter does."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from chillfl.data.loaders import FASHION_SET, MNIST_SET, _idx_owner
from chillfl.executors.processes import OUT_OF_MEMORY_EXIT, WorkerPool, _memory_note


def _full_size(mean: int) -> tuple[np.ndarray, np.ndarray]:
    return np.full((60_000, 1, 1), mean, dtype=np.uint8), np.zeros((10_000, 1, 1), dtype=np.uint8)


def test_a_full_size_set_of_neither_mean_pixel_is_not_told_as_either(tmp_path: Path) -> None:
    """KMNIST's mean pixel (~49) was the nearer of 33.3 and 72.9: loaded as MNIST's; 128 as Fashion-MNIST's."""
    assert _idx_owner(tmp_path, *_full_size(49)) is None
    assert _idx_owner(tmp_path, *_full_size(128)) is None
    assert _idx_owner(tmp_path, *_full_size(33)) is MNIST_SET and _idx_owner(tmp_path, *_full_size(73)) is FASHION_SET


def test_every_out_of_memory_note_of_the_dead_workers_is_removed(tmp_path: Path) -> None:
    """Two workers out of memory in one round: the line quotes the first, and neither note stays in the temp folder."""
    dead = [SimpleNamespace(name=f"chillfl-worker-{i}", pid=100 + i, exitcode=OUT_OF_MEMORY_EXIT, is_alive=lambda: False) for i in range(2)]
    for p, text in zip(dead, ("MemoryError: first", "MemoryError: second")):
        Path(_memory_note(str(tmp_path), p.pid)).write_text(text, encoding="utf-8")
    pool: Any = object.__new__(WorkerPool)
    pool._processes, pool._temp, pool._tasks = dead, str(tmp_path), SimpleNamespace(unsent=None)
    said = pool._lost()
    assert said is not None and said.startswith("worker chillfl-worker-0 ran out of memory (MemoryError: first)")
    assert os.listdir(tmp_path) == []


def test_the_tar_fallback_clears_execute_bits_the_owner_lacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.data.download import unpack_tar

    archive = tmp_path / "a.tar"
    with tarfile.open(archive, "w") as tar:
        for name, mode in (("set/plain.csv", 0o651), ("set/run.sh", 0o755)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = 1, mode
            tar.addfile(info, io.BytesIO(b"x"))
    real = tarfile.TarFile.extractall

    def old_extractall(self: tarfile.TarFile, path: Any = ".", members: Any = None, *, numeric_owner: bool = False) -> None:
        real(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")

    monkeypatch.delattr(tarfile, "data_filter")
    monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    unpack_tar(archive, tmp_path / "out")
    assert stat.S_IMODE((tmp_path / "out" / "set" / "plain.csv").stat().st_mode) == 0o640  # as tarfile.data_filter makes it
    assert stat.S_IMODE((tmp_path / "out" / "set" / "run.sh").stat().st_mode) == 0o755

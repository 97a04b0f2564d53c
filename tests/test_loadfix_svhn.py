"""SVHN .mat files scipy cannot read (MATLAB v7.3, a damaged compressed v5 file) are one line naming the file, not a
traceback; a label out of range names its file (report-loaders findings 5, 12)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from test_loadfix_femnist import _refused


def _svhn(root: Path, compress: bool) -> None:
    from scipy.io import savemat

    root.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", 40), ("test", 4)):
        x = np.random.default_rng(n).integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        savemat(root / f"{split}_32x32.mat", {"X": x, "y": (np.arange(n) % 10 + 1).astype(np.uint8)[:, None]}, do_compression=compress)


def test_svhn_v73_and_damaged_compressed_mat_are_one_line(tmp_path: Path) -> None:
    _svhn(tmp_path / "v73" / "svhn", compress=False)
    header = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Dec  7 00:00:00 2026 HDF5 schema 1.00 .".ljust(116) + bytes(8) + b"\x00\x02IM"
    (tmp_path / "v73" / "svhn" / "train_32x32.mat").write_bytes(header + b"\x89HDF\r\n\x1a\n" + bytes(512))
    _refused("svhn", tmp_path / "v73", r"train_32x32.mat: corrupt or wrong format \(a MATLAB v7.3 \(HDF5\) .mat file, which is not read")

    _svhn(tmp_path / "z" / "svhn", compress=True)
    path = tmp_path / "z" / "svhn" / "train_32x32.mat"
    blob = bytearray(path.read_bytes())
    middle = len(blob) // 2
    blob[middle:middle + 200] = bytes(b ^ 0x5A for b in blob[middle:middle + 200])
    path.write_bytes(bytes(blob))
    with pytest.raises(zlib.error):  # what scipy raises for it: it was a traceback
        from scipy.io import loadmat
        loadmat(str(path))
    _refused("svhn", tmp_path / "z", r"train_32x32.mat: corrupt or wrong format")


def test_svhn_label_out_of_range_names_the_file(tmp_path: Path) -> None:
    from scipy.io import savemat

    root = tmp_path / "svhn"
    _svhn(root, compress=False)
    savemat(root / "test_32x32.mat", {"X": np.zeros((32, 32, 3, 2), np.uint8), "y": np.array([[3], [12]], np.uint8)})
    _refused("svhn", tmp_path, r"test_32x32.mat: corrupt or wrong format \(labels outside 1..10")

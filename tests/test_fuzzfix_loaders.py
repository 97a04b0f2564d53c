"""idx datasets (MNIST, Fashion-MNIST, EMNIST) whose images are not 28 x 28 loaded silently into models built for
28 x 28; now one line on ``data_dir`` naming the file. The files are written in the real on-disk format, gzipped."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from chillfl.data import loaders
from chillfl.errors import ConfigError


def _idx(path: Path, array: np.ndarray) -> None:
    """``array`` (uint8) as an idx file: 0, 0, 0x08 (unsigned bytes), ndim, the sizes as big-endian int32, the bytes."""
    header = bytes([0, 0, 8, array.ndim]) + b"".join(struct.pack(">i", d) for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def _write_set(folder: Path, names: tuple[str, ...], side: int, test_side: int | None = None) -> None:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for (images, labels), n, s in zip((names[:2], names[2:]), (12, 6), (side, test_side or side)):
        _idx(folder / images, rng.integers(0, 256, (n, s, s)))
        _idx(folder / labels, rng.integers(0, 10, n))


MNIST_NAMES = tuple(f"{name}.gz" for name in loaders.IDX_FILES)


@pytest.mark.parametrize(("loader", "folder", "what"), [(loaders.load_mnist, "mnist", "MNIST"), (loaders.load_fashion_mnist, "fashion_mnist", "Fashion-MNIST")])
@pytest.mark.parametrize(("side", "test_side", "bad"), [(10, 28, 0), (28, 14, 2)])
def test_idx_images_of_another_size_are_refused_naming_the_file(
    tmp_path: Path, loader: Callable[[Path, loaders.NoOptions], loaders.RawSplit], folder: str, what: str, side: int, test_side: int, bad: int
) -> None:
    _write_set(tmp_path / "good" / folder, MNIST_NAMES, 28)
    assert loader(tmp_path / "good", loaders.NoOptions()).x_train.shape == (12, 1, 28, 28)
    _write_set(tmp_path / "bad" / folder, MNIST_NAMES, side, test_side)
    with pytest.raises(ConfigError) as info:
        loader(tmp_path / "bad", loaders.NoOptions())
    assert info.value.field == "data_dir"
    wrong = side if bad == 0 else test_side
    assert str(tmp_path / "bad" / folder / MNIST_NAMES[bad]) in info.value.message
    assert f"images are {wrong}x{wrong}, {what}'s are 28x28" in info.value.message, info.value.message


def test_emnist_images_of_another_size_are_refused(tmp_path: Path) -> None:
    names = tuple(f"emnist-digits-{part}-ubyte.gz" for part in ("train-images-idx3", "train-labels-idx1", "test-images-idx3", "test-labels-idx1"))
    _write_set(tmp_path / "emnist" / "gzip", names, 32)
    with pytest.raises(ConfigError) as info:
        loaders.load_emnist(tmp_path, loaders.EmnistOptions(split="digits"))
    assert info.value.field == "data_dir" and names[0] in info.value.message
    assert "images are 32x32, EMNIST's are 28x28" in info.value.message

"""Data files that cannot be read are one line on ``data_dir`` naming the file (exit 2), never a traceback: an idx
header whose sizes are negative or overflow, and a CIFAR batch or UCI-HAR file the file system refuses. A refusal is
said as one ("permission denied"), not as "corrupt or wrong format", which invited a re-download of a good file.

EACCES is simulated (tests may run as root, who reads any file): ``open`` (or ``np.loadtxt``) raises PermissionError
for the one file."""

from __future__ import annotations

import builtins
import errno
import gzip
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from chillfl.data import loaders
from chillfl.errors import ConfigError
from fake_datasets import cifar_batch, har_members, idx_files


def _write(root: Path, members: dict[str, bytes]) -> None:
    for name, data in members.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)


def _mnist(root: Path) -> Path:
    """MNIST's four idx files (gzipped) under ``root/mnist``; returns that folder."""
    _write(root / "mnist", idx_files([7, 0, 1, 9], [2, 3]))
    return root / "mnist"


@pytest.mark.parametrize("header", [
    b"\x00\x00\x08\x02\x00\x00\x00\x00\xff\xff\xff\xfb",  # (0, -5): numpy's product 0, as many bytes as follow
    b"\x00\x00\x08\x04" + b"\x00\x01\x00\x00" * 4,  # (65536,) * 4: numpy's int64 product wraps to 0
], ids=["negative", "overflowing"])
def test_an_idx_header_whose_sizes_multiply_to_nothing_is_one_line(tmp_path: Path, header: bytes) -> None:
    """The size check passed (0 == 0 bytes) and ``reshape`` raised outside the try: a ValueError traceback."""
    folder = _mnist(tmp_path)
    bad = folder / "train-labels-idx1-ubyte.gz"
    bad.write_bytes(gzip.compress(header))
    with pytest.raises(ConfigError) as info:
        loaders.load_mnist(tmp_path, loaders.NoOptions())
    assert info.value.field == "data_dir"
    assert info.value.message.startswith(f"cannot read {bad}: corrupt or wrong format (header says "), info.value.message


def _denied(path: Path, real: Callable[..., Any]) -> Callable[..., Any]:
    """``real`` (an opener) raising PermissionError for ``path``, as for a file of mode 000 not the user's."""

    def fake(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)) and Path(file) == path:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real(file, *args, **kwargs)

    return fake


def test_an_unreadable_cifar_batch_is_one_line_saying_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``_read_pickle`` caught no OSError: a PermissionError traceback (exit 1)."""
    members = {f"cifar-10-batches-py/data_batch_{i}": cifar_batch([i - 1, i]) for i in range(1, 6)}
    _write(tmp_path, {**members, "cifar-10-batches-py/test_batch": cifar_batch([3, 9])})
    assert loaders.load_cifar10(tmp_path, loaders.NoOptions()).x_train.shape == (10, 3, 32, 32)
    bad = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    monkeypatch.setattr(builtins, "open", _denied(bad, builtins.open))
    with pytest.raises(ConfigError) as info:
        loaders.load_cifar10(tmp_path, loaders.NoOptions())
    assert info.value.field == "data_dir" and info.value.message == f"cannot read {bad}: permission denied"


def test_an_unreadable_uci_har_file_is_one_line_saying_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """UCI-HAR's ``read`` caught ValueError only: a PermissionError traceback (exit 1)."""
    _write(tmp_path, har_members())
    assert loaders.load_uci_har(tmp_path, loaders.NoOptions()).x_train.shape == (3, 9, 128)
    bad = tmp_path / "UCI HAR Dataset" / "test" / "y_test.txt"
    monkeypatch.setattr(np, "loadtxt", _denied(bad, np.loadtxt))
    with pytest.raises(ConfigError) as info:
        loaders.load_uci_har(tmp_path, loaders.NoOptions())
    assert info.value.field == "data_dir" and info.value.message == f"cannot read {bad}: permission denied"


def test_an_unreadable_idx_file_is_not_called_corrupt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MNIST said "corrupt or wrong format ([Errno 13] Permission denied ...)" for a file it was not allowed to open."""
    bad = _mnist(tmp_path) / "t10k-images-idx3-ubyte.gz"
    monkeypatch.setattr(builtins, "open", _denied(bad, builtins.open))
    with pytest.raises(ConfigError) as info:
        loaders.load_mnist(tmp_path, loaders.NoOptions())
    assert info.value.message == f"cannot read {bad}: permission denied"


def test_a_damaged_gzip_stream_is_still_called_corrupt(tmp_path: Path) -> None:
    """gzip's BadGzipFile is an OSError without an errno: the bytes' fault, said as before."""
    bad = _mnist(tmp_path) / "t10k-labels-idx1-ubyte.gz"
    bad.write_bytes(b"not gzip at all")
    with pytest.raises(ConfigError) as info:
        loaders.load_mnist(tmp_path, loaders.NoOptions())
    assert info.value.message.startswith(f"cannot read {bad}: corrupt or wrong format (")

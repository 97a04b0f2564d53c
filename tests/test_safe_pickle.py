"""No code runs from a data file: CIFAR batches go through a restricted unpickler.

A crafted ``data_batch_1`` whose ``__reduce__`` calls ``os.system`` is refused
with a ConfigError naming the file (exit 2 from the CLI) and its command never
runs; files in the real format -- Python 2 cPickle protocol 2 as distributed,
and what Python 3 writes at any protocol -- still load.
"""

from __future__ import annotations

import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chillfl.cli import main
from chillfl.data.datasets import load_dataset
from chillfl.data.loaders import load_cifar_batch
from chillfl.errors import ConfigError

FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


class Evil:
    """Pickles as a call to ``func(*args)``."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def _images(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 3072)).astype(np.uint8)


def py2_cifar_batch(images: np.ndarray, labels: list[int], label_key: bytes = b"labels") -> bytes:
    """A batch as Python 2's cPickle (protocol 2) wrote the CIFAR files: str keys, ``numpy.core`` names."""

    def s(b: bytes) -> bytes:  # SHORT_BINSTRING / BINSTRING
        return (b"U" + bytes([len(b)]) + b) if len(b) < 256 else (b"T" + struct.pack("<i", len(b)) + b)

    def i(n: int) -> bytes:  # BININT1 / BININT2
        return b"K" + bytes([n]) if n < 256 else b"M" + struct.pack("<H", n)

    n, d = images.shape
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\n" + b"cnumpy\nndarray\n" + i(0) + b"\x85" + s(b"b") + b"\x87R"
        + b"(" + i(1) + i(n) + i(d) + b"\x86"  # state: version, shape,
        + b"cnumpy\ndtype\n" + s(b"u1") + i(0) + i(1) + b"\x87R"  # dtype('u1'),
        + b"(" + i(3) + s(b"|") + b"NNN" + b"J\xff\xff\xff\xff" * 2 + i(0) + b"tb"
        + b"\x89" + s(images.tobytes()) + b"tb"  # not Fortran order, raw bytes
    )
    names = b"](" + b"".join(s(f"img_{k}.png".encode()) for k in range(n)) + b"e"
    return (
        b"\x80\x02}(" + s(b"batch_label") + s(b"training batch 1 of 5") + s(b"data") + array
        + s(label_key) + b"](" + b"".join(i(v) for v in labels) + b"e" + s(b"filenames") + names + b"u."
    )


def _cifar_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data" / "cifar-10-batches-py"
    root.mkdir(parents=True)
    for k, name in enumerate(FILES):
        (root / name).write_bytes(py2_cifar_batch(_images(4, k), [k % 10, 1, 2, 3]))
    return root


def test_the_distributed_format_loads(tmp_path: Path) -> None:
    root = _cifar_dir(tmp_path)
    batch = load_cifar_batch(root / "data_batch_1")
    assert set(batch) == {b"batch_label", b"data", b"labels", b"filenames"}
    assert np.array_equal(batch[b"data"], _images(4, 0)) and batch[b"labels"] == [0, 1, 2, 3]
    data = load_dataset("cifar10", data_dir=tmp_path / "data")
    assert tuple(data.x_train.shape) == (20, 3, 32, 32) and data.y_train[:4].tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_python3_pickles_load_at_every_protocol(tmp_path: Path, protocol: int) -> None:
    path = tmp_path / "batch"
    images = _images(2, 1)
    path.write_bytes(pickle.dumps({b"data": images, b"labels": [3, 4]}, protocol=protocol))
    batch = load_cifar_batch(path)
    assert np.array_equal(batch[b"data"], images) and batch[b"labels"] == [3, 4]


GADGETS = {
    "os.system": lambda marker: Evil(os.system, f"touch {marker}"),
    "builtins.exec": lambda marker: Evil(exec, f"open({str(marker)!r}, 'w').close()"),
    "numpy runstring": lambda marker: Evil(np.testing._private.utils.runstring, f"open({str(marker)!r}, 'w').close()", {}),
    "nested in the dict": lambda marker: {b"data": Evil(os.system, f"touch {marker}"), b"labels": [0]},
    "object array": lambda marker: {b"data": np.array([Evil(os.system, f"touch {marker}")], dtype=object), b"labels": [0]},
}


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
@pytest.mark.parametrize("gadget", sorted(GADGETS))
def test_a_malicious_batch_is_refused_and_runs_nothing(tmp_path: Path, gadget: str, protocol: int) -> None:
    root = _cifar_dir(tmp_path)
    marker = tmp_path / "MARKER"
    (root / "data_batch_1").write_bytes(pickle.dumps(GADGETS[gadget](marker), protocol=protocol))
    with pytest.raises(ConfigError) as info:
        load_dataset("cifar10", data_dir=tmp_path / "data")
    assert info.value.field == "data_dir" and "data_batch_1" in info.value.message
    assert not marker.exists()


def test_the_cli_refuses_it_with_exit_2(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    root = _cifar_dir(tmp_path)
    marker = tmp_path / "MARKER"
    (root / "data_batch_1").write_bytes(pickle.dumps(Evil(os.system, f"touch {marker}")))
    config = tmp_path / "exp.toml"
    out = tmp_path / "out"
    config.write_text(f'out_dir = "{out}"\ndata_dir = "{tmp_path / "data"}"\n[dataset]\nname = "cifar10"\n', encoding="utf-8")
    assert main(["run", str(config), "--quiet"]) == 2
    err = capfd.readouterr().err
    assert len(err.splitlines()) == 1 and "error: data_dir: cannot read" in err and "data_batch_1" in err
    assert "Traceback" not in err
    assert not marker.exists()
    assert not out.exists() or not any(out.iterdir())

"""CIFAR pickles as Python 3 writes them (b"" at protocols 0-2 is __builtin__.bytes(); a latin-1 re-save has str keys)
read through the restricted unpickler, which still executes nothing else; a missing key and a label out of range name
the file; CIFAR-10's binary version is named, not "not found" (report-loaders findings 9, 11, 12)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from chillfl.data import load_dataset
from test_loadfix_femnist import _refused


def _cifar(root: Path, batches: dict[str, dict], protocol: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, batch in batches.items():
        (root / name).write_bytes(pickle.dumps(batch, protocol=protocol))


def _cifar_batches(keys: type = bytes, label: bytes | str = b"") -> dict[str, dict]:
    def key(k: str) -> bytes | str:
        return k.encode() if keys is bytes else k

    images = np.random.default_rng(1).integers(0, 256, (12, 3072), dtype=np.uint8)
    out = {}
    for i, name in enumerate([f"data_batch_{j}" for j in range(1, 6)] + ["test_batch"]):
        out[name] = {key("batch_label"): label, key("data"): images[2 * i:2 * i + 2], key("labels"): [i, (i + 3) % 10]}
    return out


def test_cifar_python3_pickles_of_empty_bytes_and_str_keys_read(tmp_path: Path) -> None:
    """b"" at protocols 0-2 is ``__builtin__.bytes()``; a latin-1 re-save has str keys: both read as the protocol-5 batches."""
    _cifar(tmp_path / "want" / "cifar-10-batches-py", _cifar_batches(), 5)
    want = load_dataset("cifar10", data_dir=tmp_path / "want")
    for case, batches, protocol in (("p0", _cifar_batches(), 0), ("p2", _cifar_batches(), 2), ("str", _cifar_batches(str, "training batch 1 of 5"), 4)):
        _cifar(tmp_path / case / "cifar-10-batches-py", batches, protocol)
        got = load_dataset("cifar10", data_dir=tmp_path / case)
        assert got.y_train.tolist() == want.y_train.tolist() == [0, 3, 1, 4, 2, 5, 3, 6, 4, 7]
        assert bool((got.x_train == want.x_train).all()) and bool((got.x_test == want.x_test).all())


def test_cifar_bytes_with_an_argument_is_refused_and_a_missing_key_is_named(tmp_path: Path) -> None:
    root = tmp_path / "cifar-10-batches-py"
    _cifar(root, _cifar_batches(), 2)
    (root / "data_batch_2").write_bytes(b"\x80\x02c__builtin__\nbytes\nJ\x00\x00\x00\x40\x85R.")  # bytes(2**30)
    _refused("cifar10", tmp_path, r"data_batch_2: corrupt or wrong format \(refusing bytes\(...\) with arguments")
    batches = _cifar_batches()
    del batches["data_batch_2"][b"data"]
    _cifar(root, batches, 2)
    _refused("cifar10", tmp_path, r"data_batch_2: corrupt or wrong format \(no key b'data' \(keys: b'batch_label', b'labels'\)\)")


def test_cifar10_binary_version_is_named(tmp_path: Path) -> None:
    binary = tmp_path / "cifar-10-batches-bin"
    binary.mkdir()
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        (binary / name).write_bytes(bytes(3073 * 2))
    message = _refused("cifar10", tmp_path, "cifar-10-batches-bin holds CIFAR-10's binary version")
    assert "python version" in message and "chillfl data download cifar10" in message


def test_a_cifar_label_out_of_range_names_its_batch(tmp_path: Path) -> None:
    root = tmp_path / "c" / "cifar-10-batches-py"
    batches = _cifar_batches()
    batches["data_batch_3"][b"labels"] = [1, 14]
    _cifar(root, batches, 2)
    _refused("cifar10", tmp_path / "c", r"data_batch_3: corrupt or wrong format \(labels: labels outside 0..9 \(got 1..14\)\)")

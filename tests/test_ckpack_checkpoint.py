"""Checkpoints pack small tensors into one safetensors entry per dtype (format version 2; cpuperf finding 1).

Why: per-client states are thousands of tiny tensors, and writing, hashing and reading a checkpoint cost per tensor,
not per byte. What must hold: every leaf comes back as its own tensor (dtype, shape, strides, bytes as written, no
shared storage), the checksum covers the packed bytes, and version 1 files (one entry per tensor) read as before.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch

from chillfl.errors import ConfigError
from chillfl.storage import checkpoint, checkpoint_tables
from chillfl.storage.checkpoint import CorruptCheckpoint, decode_checkpoint, encode_state, read_checkpoint, write_state

from test_state_dicts import assert_same, bits


def _header(data: bytes) -> dict[str, Any]:
    """The safetensors header of a file: its entries (name -> dtype, shape, data_offsets) and ``__metadata__``."""
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    assert isinstance(header, dict)
    return header


def _entries(data: bytes) -> list[str]:
    return [name for name in _header(data) if name != "__metadata__"]


def _nan(bits32: int) -> torch.Tensor:
    return torch.tensor([bits32, 0x7FC00000, -1], dtype=torch.int32).view(torch.float32)


def _edge_tree() -> dict[str, Any]:
    grad = torch.linspace(-1, 1, 6, dtype=torch.float64).reshape(2, 3).requires_grad_(True)
    return {
        "scalar": torch.tensor(2.5),
        "scalar_int": torch.tensor(-7, dtype=torch.int64),
        "empty": torch.zeros(0, 3),
        "empty_int": torch.zeros(4, 0, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "f64": torch.arange(5, dtype=torch.float64) / 3,
        "bf16": (torch.arange(7, dtype=torch.float32) / 7).to(torch.bfloat16),
        "i64": torch.tensor([2**62, -(2**40), 0]),
        "transposed": torch.arange(12.0).reshape(3, 4).t(),
        "transposed_i64": torch.arange(6).reshape(2, 3).t(),
        "gapped": torch.arange(10.0)[::2],
        "nan": _nan(0x7FC00001),
        "neg_nan_bf16": torch.tensor([0xFFC1 - 0x10000, 0x7F81], dtype=torch.int16).view(torch.bfloat16),
        "grad": grad,
        "big": torch.arange(checkpoint.PACK_MAX_NUMEL + 2, dtype=torch.float32).reshape(-1, 2).t(),
        "nested": [{"w": torch.ones(2, 2) * 3, "n": 4, "f": float("nan")}, torch.ones(1)],
    }


def _assert_own_storage(tree: Any) -> None:
    """Each tensor of a decoded tree holds its own storage of exactly its bytes (no view into a shared buffer)."""
    seen: set[int] = set()

    def walk(node: Any) -> None:
        if isinstance(node, torch.Tensor):
            assert node.untyped_storage().nbytes() == node.numel() * node.element_size()
            if node.numel():
                assert node.untyped_storage().data_ptr() not in seen
                seen.add(node.untyped_storage().data_ptr())
        elif isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(tree)


def test_small_tensors_of_every_kind_come_back_with_their_dtype_shape_strides_and_bytes() -> None:
    tree = _edge_tree()
    data = encode_state(tree, {"k": 1})
    back, run = decode_checkpoint(data)
    assert run == {"k": 1}
    # the tree with its leaves as the reader hands them back: detached, dense ones with their strides, gapped contiguous
    expected = {**tree, "gapped": tree["gapped"].contiguous(), "grad": tree["grad"].detach()}
    assert_same(back, expected)
    for key in ("transposed", "transposed_i64", "big"):
        assert back[key].stride() == tree[key].stride() != back[key].contiguous().stride(), key
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert back[key].stride() == value.stride(), key
    assert back["gapped"].is_contiguous() and not back["grad"].requires_grad
    assert torch.equal(bits(back["nan"]), bits(tree["nan"])) and torch.equal(bits(back["neg_nan_bf16"]), bits(tree["neg_nan_bf16"]))
    _assert_own_storage(back)
    # the small ones are packed, one entry per dtype; the one over the limit is an entry of its own
    entries = _entries(data)
    packed = sorted(e.removeprefix(checkpoint.PACK_PREFIX) for e in entries if e.startswith(checkpoint.PACK_PREFIX))
    assert packed == ["bfloat16", "bool", "float32", "float64", "int64"]
    assert sum(not e.startswith(checkpoint.PACK_PREFIX) for e in entries) == 1


def test_five_thousand_tiny_tensors_are_a_few_safetensors_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost of a checkpoint went by its number of entries: per-client states must not be one entry each."""
    monkeypatch.setattr(checkpoint_tables, "TABLE_MIN_ROWS", 10**9)  # packing (version 2/3); tables: test_ckptv4_*
    tree = {"clients": {str(c): {"w": torch.full((2, 2), float(c)), "b": torch.tensor(c), "on": torch.tensor(c % 2 == 0)} for c in range(1700)}}
    path = tmp_path / "c.safetensors"
    write_state(path, tree)
    entries = _entries(path.read_bytes())
    assert len(entries) == 3, entries  # float32, int64, bool
    back, _ = read_checkpoint(path)
    assert_same(back, tree)
    _assert_own_storage(back)


def test_a_flipped_byte_in_a_packed_buffer_is_refused(tmp_path: Path) -> None:
    data = encode_state({"a": torch.arange(10.0), "b": {"c": torch.ones(3)}, "round": 2})
    header = _header(data)
    start, end = header[checkpoint.PACK_PREFIX + "float32"]["data_offsets"]
    (size,) = struct.unpack("<Q", data[:8])
    where = 8 + size + (start + end) // 2
    path = tmp_path / "c.safetensors"
    path.write_bytes(data[:where] + bytes([data[where] ^ 0x01]) + data[where + 1 :])
    with pytest.raises(CorruptCheckpoint, match="checksum"):
        read_checkpoint(path)


def _signed(doc: dict[str, Any], tensors: dict[str, torch.Tensor]) -> bytes:
    """A checkpoint of ``doc`` written by hand, signed as the writer signs one."""
    doc[checkpoint.DIGEST_KEY] = checkpoint._digest(checkpoint._text(doc), tensors)
    return safetensors.torch.save(tensors, metadata={checkpoint.METADATA_KEY: checkpoint._text(doc)})


def test_a_version_1_file_with_one_entry_per_tensor_reads_as_before(tmp_path: Path) -> None:
    """Checkpoints written before packing (a run stopped before an upgrade) still resume."""
    w = torch.arange(6.0).reshape(2, 3)
    tensors = {"0": w.clone(), "1": torch.tensor(5), "2": torch.ones(2, dtype=torch.bool), "3": torch.zeros(0)}
    doc: dict[str, Any] = {
        "version": 1,
        "tree": {"round": 3, "w": {"__tensor__": "0"}, "n": {"__tensor__": "1"}, "rest": [{"__tensor__": "2"}, {"__tensor__": "3"}]},
        "strides": {"0": [1, 2]},  # a column-major (2, 3) tensor, stored row-major
        "run": {},
    }
    path = tmp_path / "old.safetensors"
    path.write_bytes(_signed(doc, tensors))
    back, run = read_checkpoint(path)
    assert run == {} and back["round"] == 3
    assert back["w"].stride() == (1, 2) and torch.equal(back["w"], w)
    assert_same(back["n"], torch.tensor(5))
    assert_same(back["rest"], [torch.ones(2, dtype=torch.bool), torch.zeros(0)])
    # a version 1 file has no slots: a "packed." entry there is a plain tensor name, never unpacked
    doc = {"version": 1, "tree": {"x": {"__tensor__": "packed.float32"}}, "slots": {"y": ["packed.float32", 0, 1, []]}, "run": {}}
    path.write_bytes(_signed(doc, {"packed.float32": torch.ones(2)}))
    assert_same(read_checkpoint(path)[0], {"x": torch.ones(2)})


@pytest.mark.parametrize(
    "slot",
    [
        ["packed.float32", 0, 4, [5]],  # shape and numel disagree
        ["packed.float32", 2, 4, [4]],  # past the buffer's end
        ["packed.float32", -1, 1, [1]],
        ["packed.float64", 0, 1, []],  # no such buffer
        ["0", 0, 1, []],  # not a buffer
        ["packed.float32", 0, 1],
        ["packed.float32", 0, True, [1]],
        "packed.float32",
    ],
)
def test_a_malformed_slot_is_a_corrupt_checkpoint(slot: Any, tmp_path: Path) -> None:
    doc = {"version": 2, "tree": {"x": {"__tensor__": "1"}}, "slots": {"1": slot}, "run": {}}
    path = tmp_path / "c.safetensors"
    path.write_bytes(_signed(doc, {"packed.float32": torch.ones(5), "0": torch.ones(70000)}))
    with pytest.raises(ConfigError) as info:
        read_checkpoint(path)
    assert info.value.field == "checkpoint"


def test_a_packed_buffer_is_no_leaf_of_the_tree(tmp_path: Path) -> None:
    """A tree naming a buffer itself would hand out a tensor aliasing every packed leaf: the file is refused."""
    doc = {"version": 2, "tree": {"x": {"__tensor__": "packed.float32"}, "y": {"__tensor__": "0"}}, "slots": {"0": ["packed.float32", 0, 2, [2]]}, "run": {}}
    path = tmp_path / "c.safetensors"
    path.write_bytes(_signed(doc, {"packed.float32": torch.ones(2)}))
    with pytest.raises(CorruptCheckpoint):
        read_checkpoint(path)


def test_saving_one_decoded_leaf_writes_only_its_own_bytes(tmp_path: Path) -> None:
    """A leaf is a copy of its slice: ``torch.save`` of one client's state does not drag the whole buffer along."""
    tree = {str(c): torch.full((3,), float(c)) for c in range(2000)}
    back, _ = decode_checkpoint(encode_state(tree))
    torch.save(back["7"], tmp_path / "one.pt")
    assert (tmp_path / "one.pt").stat().st_size < 2000


def test_a_thousand_clients_tables_are_a_few_entries_and_come_back_bitwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """What per-client methods checkpoint (a :class:`ClientParams` through ``client_params_state``): it was one
    safetensors entry per client and parameter, and the checkpoint's cost grew with the clients seen."""
    monkeypatch.setattr(checkpoint_tables, "TABLE_MIN_ROWS", 10**9)  # packing (version 2/3); tables: test_ckptv4_*
    from chillfl.aggregation.base import client_params_state, load_client_params
    from chillfl.aggregation.client_states import ClientParams

    g = torch.Generator().manual_seed(0)
    tables = {
        c: {"fc1.weight": torch.randn(8, 64, generator=g).t(), "fc1.bias": torch.randn(8, generator=g), "fc2.weight": torch.randn(10, 8, generator=g), "n": torch.tensor(c)}
        for c in range(1000)
    }
    store = ClientParams.of(tables)
    data = encode_state({"clients": client_params_state(store)})
    assert len(_entries(data)) == 2  # float32, int64
    back = ClientParams.of(load_client_params(decode_checkpoint(data)[0]["clients"]))
    assert list(back) == list(store)
    for c in (0, 517, 999):
        assert_same(back[c], store[c])
        assert back[c]["fc1.weight"].stride() == tables[c]["fc1.weight"].stride()

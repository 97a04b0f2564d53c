"""Forged checkpoints that the readers let through or refused in the wrong words, and a state the writer could not
refuse (rev113 2-5).

* A version 4 tensor column whose rows have many size-1 dimensions: each row is read back as a tensor holding every
  size and stride, so a 180 KB file made the reader allocate hundreds of MB. Rows may have at most
  :data:`~chillfl.storage.checkpoint_tables.TABLE_MAX_DIMS` dimensions; a table of tensors with more stays JSON.
* A stride past int64 on a size-1 dimension (free in a dense layout) reached ``torch.empty_strided``, whose refusal
  put a 1.5 KB C++ backtrace in the one-line error: in a version 4 column and in a version 2 document's strides.
* A column ``kind`` that is a list was refused as "unhashable type: 'list'".
* A quantized tensor in a state ended the write in safetensors' ``KeyError: torch.qint8`` traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import pytest
import safetensors.torch
import torch

from chillfl.storage import checkpoint, checkpoint_tables
from chillfl.storage.checkpoint import CorruptCheckpoint, UnstorableState, encode_state, read_checkpoint, read_state, write_state
from chillfl.storage.checkpoint_tables import TABLE_MAX_DIMS
from test_ckpack_checkpoint import _header
from test_ckptv4_tables import _forged

ROWS = checkpoint_tables.TABLE_MIN_ROWS
Edit = Callable[[dict[str, Any], dict[str, torch.Tensor]], None]


def _version(data: bytes) -> int:
    return int(json.loads(_header(data)["__metadata__"][checkpoint.METADATA_KEY])["version"])


def _forged_v2(data: bytes, edit: Edit) -> bytes:
    """The version 2 file ``data`` (its document in the header) with ``edit(document, entries)`` applied, signed again."""
    doc = json.loads(_header(data)["__metadata__"][checkpoint.METADATA_KEY])
    assert doc["version"] == 2
    entries = safetensors.torch.load(data)
    edit(doc, entries)
    doc.pop(checkpoint.DIGEST_KEY)
    doc[checkpoint.DIGEST_KEY] = checkpoint._digest(checkpoint._text(doc), entries)
    return safetensors.torch.save(entries, metadata={checkpoint.METADATA_KEY: checkpoint._text(doc)})


def _refused(data: bytes, tmp_path: Path, says: str) -> str:
    """The one line ``read_checkpoint`` refuses ``data`` with; it says ``says`` and holds no C++ frames."""
    path = tmp_path / "checkpoint.safetensors"
    path.write_bytes(data)
    with pytest.raises(CorruptCheckpoint, match="not a valid chillfl checkpoint") as caught:
        read_checkpoint(path)
    line = str(caught.value)
    assert "\n" not in line and "frame #" not in line and len(line) < 400, line
    assert says in line, line
    return line


def _column_of(doc: dict[str, Any]) -> dict[str, Any]:
    column = doc["tree"]["t"]["__table__"]["columns"][0]
    assert isinstance(column, dict)
    return column


def _rows_of_dims(dims: int) -> Edit:
    """The table ``t``'s tensor column made 20,000 rows of one byte and ``dims`` size-1 dimensions (the finding's forgery)."""
    def edit(doc: dict[str, Any], entries: dict[str, torch.Tensor]) -> None:
        spec, n = doc["tree"]["t"]["__table__"], 20_000
        spec["rows"] = n
        entries[spec["keys"]] = torch.arange(n)
        entries[spec["columns"][0]["entry"]] = torch.zeros((n,) + (1,) * dims, dtype=torch.uint8)
    return edit


def _bytes_table() -> bytes:
    return encode_state({"round": 1, "t": {str(c): torch.zeros(4, dtype=torch.uint8) for c in range(ROWS)}})


def test_a_column_of_rows_past_the_dimension_bound_is_refused(tmp_path: Path) -> None:
    data = _bytes_table()
    line = _refused(_forged(data, _rows_of_dims(TABLE_MAX_DIMS + 1)), tmp_path, f"rows of {TABLE_MAX_DIMS + 1} dimensions (at most {TABLE_MAX_DIMS})")
    assert line.count("\n") == 0
    _refused(_forged(data, _rows_of_dims(1000)), tmp_path, "rows of 1000 dimensions")
    path = tmp_path / "bound.safetensors"  # at the bound it reads
    path.write_bytes(_forged(data, _rows_of_dims(TABLE_MAX_DIMS)))
    assert read_state(path)["t"]["19999"].shape == (1,) * TABLE_MAX_DIMS


def test_a_table_of_tensors_past_the_dimension_bound_is_written_as_json_and_reads_back() -> None:
    """No writer makes a file the reader refuses: such a table stays a node a value (version 2)."""
    for dims, version in ((TABLE_MAX_DIMS, 4), (TABLE_MAX_DIMS + 1, 2)):
        tree = {"round": 1, "t": {str(c): torch.full((2,) + (1,) * (dims - 1), float(c)) for c in range(ROWS)}}
        data = encode_state(tree)
        assert _version(data) == version
        back = checkpoint.decode_state(data)["t"]
        assert list(back) == list(tree["t"])
        assert all(back[k].shape == tree["t"][k].shape and torch.equal(back[k], tree["t"][k]) for k in tree["t"])


def _permuted(numel: int) -> torch.Tensor:
    """A dense, non-contiguous tensor with a size-1 dimension: written with its strides, ``[1, numel // 2, numel // 2]``."""
    return torch.arange(numel, dtype=torch.float32).reshape(2, 1, numel // 2).permute(2, 1, 0)


def test_a_stride_past_int64_in_a_version_4_column_is_refused_in_one_short_line(tmp_path: Path) -> None:
    data = encode_state({"round": 1, "t": {str(c): _permuted(6) for c in range(ROWS)}})
    assert _column_of(json.loads(_header(data)["__metadata__"][checkpoint.METADATA_KEY]))["strides"] == [1, 3, 3]

    def edit(doc: dict[str, Any], entries: dict[str, torch.Tensor]) -> None:
        _column_of(doc)["strides"][1] = 2**64
    _refused(_forged(data, edit), tmp_path, "malformed strides of a table column")


@pytest.mark.parametrize("numel", [6, 2 * checkpoint.PACK_MAX_NUMEL], ids=["packed", "own-entry"])
def test_a_stride_past_int64_in_a_version_2_document_is_refused_in_one_short_line(numel: int, tmp_path: Path) -> None:
    data = encode_state({"round": 1, "x": _permuted(numel)})
    half = numel // 2

    def edit(doc: dict[str, Any], entries: dict[str, torch.Tensor]) -> None:
        (name,) = doc["strides"]
        assert doc["strides"][name] == [1, half, half]
        doc["strides"][name][1] = 2**64
    _refused(_forged_v2(data, edit), tmp_path, "malformed strides for tensor")


def test_the_largest_int64_stride_of_a_size_1_dimension_still_reads(tmp_path: Path) -> None:
    """The bound is int64's, not tighter: a size-1 dimension's stride is free, and 2**63 - 1 was (and is) accepted."""
    data = encode_state({"round": 1, "x": _permuted(6)})

    def edit(doc: dict[str, Any], entries: dict[str, torch.Tensor]) -> None:
        (name,) = doc["strides"]
        doc["strides"][name][1] = 2**63 - 1
    path = tmp_path / "c.safetensors"
    path.write_bytes(_forged_v2(data, edit))
    x = read_state(path)["x"]
    assert torch.equal(x, _permuted(6)) and x.stride() == (1, 2**63 - 1, 3)


def test_a_column_kind_that_is_a_list_is_named_as_such(tmp_path: Path) -> None:
    def edit(doc: dict[str, Any], entries: dict[str, torch.Tensor]) -> None:
        _column_of(doc)["kind"] = ["x"]
    line = _refused(_forged(_bytes_table(), edit), tmp_path, "malformed table column: its kind is a list, not a name")
    assert "unhashable" not in line


def _quantized(i: int) -> torch.Tensor:
    return torch.quantize_per_tensor(torch.full((3,), float(i)), 0.1, 0, torch.qint8)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")  # deprecated by torch, still made by users' states
@pytest.mark.parametrize("per_client, where", [(False, "protocol.q"), (True, "protocol.clients.0")], ids=["alone", "per-client"])
def test_a_quantized_tensor_is_unstorable_state_named_by_its_place(per_client: bool, where: str, tmp_path: Path) -> None:
    """Per client (a table's worth of rows) no table is made: the walk names the first row. The runner turns
    UnstorableState into one ConfigError on the field that chose the part (``runner._checkpoint``)."""
    state = {"clients": {str(c): _quantized(c) for c in range(ROWS)}} if per_client else {"q": _quantized(1)}
    with pytest.raises(UnstorableState) as caught:
        write_state(tmp_path / "c.safetensors", {"round": 1, "protocol": state})
    assert caught.value.where == where
    assert str(caught.value).startswith(f"cannot checkpoint a quantized tensor at {where}: store its int_repr()")
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "c.safetensors").exists()

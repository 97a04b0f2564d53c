"""Per-client tables of a checkpoint as columns (format version 4).

Before, a per-client table (ledger totals, ``local.acc``, control variates: a dict keyed by client id) was JSON in the
checkpoint, a node per value: at 10^6 clients a write cost about 17.5 s of CPU. A table of at least 256 rows whose
values are one scalar kind, tensors of one dtype/shape/layout, or dicts of one key order of such fields is now one
entry a column. What must hold: a read gives EXACTLY what the JSON (version 2/3) read gives (types, bits, key order
and spelling, tensors' dtype/shape/strides/own storage), a state without such a table keeps its old bytes, and a
damaged or forged version 4 file is refused as any damaged checkpoint is.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any, Callable

import pytest
import safetensors.torch
import torch

from chillfl.cli import main
from chillfl.runner import CHECKPOINT
from chillfl.storage import checkpoint, checkpoint_tables
from chillfl.storage.checkpoint import CorruptCheckpoint, Tampered, decode_checkpoint, encode_state, read_checkpoint, saved_round

from resume_cases import check_resume
from test_ckpack_checkpoint import _assert_own_storage, _entries, _header
from test_ckptbig_checkpoint import federation, header_size, old_encode_state
from test_damaged_files import _one_line_error, cut  # noqa: F401 (a fixture)
from test_state_dicts import assert_same, bits

ROWS = checkpoint_tables.TABLE_MIN_ROWS


def _f(pattern: int) -> float:
    return float(struct.unpack("<d", struct.pack("<Q", pattern))[0])


def _bits(x: float) -> int:
    return int(struct.unpack("<Q", struct.pack("<d", x))[0])


ODD_FLOATS = [
    -0.0, 0.0, math.inf, -math.inf, math.nan, _f(0x7FF8000000000123), _f(0xFFF8000000000000), _f(0x7FF0000000000001),  # a signalling NaN
    5e-324, -1.7976931348623157e308, 0.1, 1 / 3,
]
ODD_INTS = [2**63 - 1, -(2**63), 2**53 + 1, -(2**53) - 1, 0, -1, 7]


def _document(data: bytes) -> dict[str, Any]:
    """The metadata document of a checkpoint's bytes, wherever it is (header or entry)."""
    doc = json.loads(_header(data)["__metadata__"]["chillfl"])
    if "tree" not in doc:
        stored = safetensors.torch.load(data)
        doc = json.loads(stored[checkpoint.DOCUMENT].numpy().tobytes())
    assert isinstance(doc, dict)
    return doc


def _version(data: bytes) -> int:
    return int(_document(data)["version"])


def _json_read(tree: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, dict[str, Any]]:
    """The version 2/3 file of ``tree`` (no tables) and what reading it gives: what a version 4 read must give."""
    with monkeypatch.context() as mp:
        mp.setattr(checkpoint_tables, "TABLE_MIN_ROWS", 10**9)
        data = encode_state(tree)
    assert _version(data) in (2, 3)
    return data, decode_checkpoint(data)[0]


def _same_as_json(tree: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tables: int) -> dict[str, Any]:
    """Writes ``tree`` (version 4 when ``tables``, the number of tables expected, is not 0) and checks its read is
    the version 2/3 read, bit for bit, strides and own storage included; returns it."""
    data = encode_state(tree, {"k": 1})
    back, run = decode_checkpoint(data)
    assert run == {"k": 1}
    assert _version(data) == (4 if tables else 2)
    assert json.dumps(_document(data)).count('"__table__"') == tables
    old_data, old = _json_read(tree, monkeypatch)
    if not tables:
        assert data == encode_state(tree, {"k": 1}) and old_data == encode_state(tree)  # no table: the old bytes
    assert_same(back, old)
    _same_strides(back, old)
    _assert_own_storage(back)
    return back


def _same_strides(a: Any, b: Any) -> None:
    if isinstance(a, torch.Tensor):
        assert a.stride() == b.stride() and a.is_contiguous() == b.is_contiguous()
    elif isinstance(a, dict):
        for k in a:
            _same_strides(a[k], b[k])
    elif isinstance(a, list):
        for x, y in zip(a, b):
            _same_strides(x, y)


def _cycle(values: list[Any], n: int = ROWS) -> list[Any]:
    return [values[i % len(values)] for i in range(n)]


def test_scalar_tables_come_back_with_their_types_and_every_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """ints past 2^53 and both int64 ends, bools, floats: -0.0, infinities, NaNs with payloads, a signalling one."""
    keys = [str(c) for c in range(ROWS)]
    tree = {
        "round": 3,
        "ints": dict(zip(keys, _cycle(ODD_INTS))),
        "bools": dict(zip(keys, _cycle([True, False, False]))),
        "floats": dict(zip(keys, _cycle(ODD_FLOATS))),
    }
    back = _same_as_json(tree, monkeypatch, tables=3)
    assert_same(back, tree)
    assert [type(v) for v in back["ints"].values()] == [int] * ROWS and [type(v) for v in back["bools"].values()] == [bool] * ROWS
    assert [_bits(v) for v in back["floats"].values()] == [_bits(v) for v in tree["floats"].values()]  # type: ignore[attr-defined]
    assert {_bits(v) for v in back["floats"].values()} >= {0x8000000000000000, 0x7FF8000000000123, 0x7FF0000000000001}


def test_dict_rows_of_one_key_order_are_columns_and_come_back_as_dicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger's shape: ``{client: {"down.params": int, ...}}``, and rows mixing scalar and tensor fields."""
    g = torch.Generator().manual_seed(0)
    tree = {
        "ledger": {str(c): {"down.params": 18216 * c, "up.params": -c, "ok": c % 2 == 0, "acc": c / 7} for c in range(300)},
        "clients": {str(c): {"w": torch.randn(3, 2, generator=g).t(), "n": torch.tensor(c), "seen": 1} for c in range(300)},
    }
    back = _same_as_json(tree, monkeypatch, tables=2)
    assert back["clients"]["5"]["w"].stride() == (1, 2)


@pytest.mark.parametrize(
    "column",
    [
        [torch.randn(4, 3)[:, ::2] for _ in range(3)],  # gapped: comes back contiguous, as from JSON
        [torch.arange(6.0).reshape(2, 3).t() + i for i in range(3)],  # transposed: comes back with its strides
        [torch.tensor(float(i)) for i in range(3)],  # 0-dim
        [(torch.arange(5, dtype=torch.float32) / (i + 3)).to(torch.bfloat16) for i in range(3)],
        [torch.tensor([0x7FC00001, -1], dtype=torch.int32).view(torch.float32) for _ in range(3)],  # NaN payloads
        [torch.ones(2, requires_grad=True) * i for i in range(3)],  # part of a graph: back detached
        [torch.nn.Parameter(torch.ones(2) * i) for i in range(3)],  # a subclass: back a plain tensor
        [torch.arange(checkpoint.PACK_MAX_NUMEL + 1, dtype=torch.int16) for _ in range(3)],  # large: its own entry in JSON
    ],
    ids=["gapped", "transposed", "0dim", "bf16", "nan", "graph", "parameter", "large"],
)
def test_tensor_tables_come_back_as_the_json_format_gives_them(column: list[torch.Tensor], monkeypatch: pytest.MonkeyPatch) -> None:
    tree = {"t": {str(c): t for c, t in enumerate(_cycle(column))}}
    back = _same_as_json(tree, monkeypatch, tables=1)
    for c in ("0", "1", "2"):
        assert torch.equal(bits(back["t"][c]), bits(column[int(c)])) and not back["t"][c].requires_grad
        assert type(back["t"][c]) is torch.Tensor


@pytest.mark.parametrize(
    "values",
    [
        _cycle([1, 2.0]),  # ints and floats
        _cycle([1, True]),  # ints and bools (bool is an int subclass: must stay apart)
        _cycle([1.0, None]),
        _cycle([1, 2**63]),  # past int64: JSON holds any int
        _cycle([1, -(2**63) - 1]),
        _cycle(["a", "b"]),  # strings stay JSON
        _cycle([[1], [2]]),
        _cycle([{"a": 1, "b": 2}, {"b": 2, "a": 1}]),  # dict rows of two key orders
        _cycle([{"a": 1}, {"a": 1, "b": 2}]),
        _cycle([{"a": 1}, {"a": 1.5}]),  # one field of two kinds
        _cycle([{"a": {"x": 1}}]),  # nested
        _cycle([{}]),
        _cycle([torch.ones(2), torch.ones(3)]),  # two shapes
        _cycle([torch.ones(2), torch.ones(2, dtype=torch.float64)]),  # two dtypes
        _cycle([torch.ones(2, 3), torch.ones(3, 2).t()]),  # two layouts
        _cycle([torch.ones(2), 1.0]),
        _cycle([torch.zeros(0, 3, dtype=torch.int64)]),  # no elements: no bytes a row, so no column (a forged file's blow-up)
    ],
    ids=["int-float", "int-bool", "float-none", "past-int64", "below-int64", "str", "list", "key-orders", "key-sets",
         "field-kinds", "nested", "empty-rows", "shapes", "dtypes", "layouts", "tensor-float", "no-elements"],
)
def test_mixed_tables_stay_json(values: list[Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Alone, the file is the version 2 one, byte for byte; beside a table, it stays JSON in the version 4 file."""
    table = {str(c): v for c, v in enumerate(values)}
    back = _same_as_json({"mixed": table}, monkeypatch, tables=0)
    assert_same(back["mixed"], decode_checkpoint(old_encode_state({"mixed": table}))[0]["mixed"])
    _same_as_json({"mixed": table, "acc": {str(c): 0.5 for c in range(ROWS)}}, monkeypatch, tables=1)


def test_the_threshold_255_rows_stay_json_256_are_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ROWS == 256
    under = federation(ROWS - 1)
    assert encode_state(under, {"k": 1}) == old_encode_state(under, {"k": 1})  # the bytes of the encoder before tables
    _same_as_json(federation(ROWS - 1), monkeypatch, tables=0)
    _same_as_json(federation(ROWS), monkeypatch, tables=4)  # ledger clients, local acc and loss, controls
    _same_as_json({"empty": {}, "round": 1}, monkeypatch, tables=0)


@pytest.mark.parametrize(
    "keys, as_entry",
    [
        ([str(c) for c in range(ROWS)], True),
        ([str(c) for c in range(ROWS, 0, -1)], True),  # order kept
        ([str(-c * 10**15) for c in range(ROWS)], True),
        (["07"] + [str(c) for c in range(1, ROWS)], False),  # int("07") is 7: no
        (["+1"] + [str(c) for c in range(2, ROWS + 1)], False),
        (["1_0"] + [str(c) for c in range(ROWS - 1)], False),
        ([" 1"] + [str(c) for c in range(2, ROWS + 1)], False),
        (["-0"] + [str(c) for c in range(1, ROWS)], False),
        (["\u0661"] + [str(c) for c in range(2, ROWS + 1)], False),  # an Arabic-Indic 1
        ([str(2**63)] + [str(c) for c in range(ROWS - 1)], False),
        ([f"client-{c}" for c in range(ROWS)], False),
    ],
    ids=["ids", "reversed", "negative", "leading-zero", "plus", "underscore", "space", "minus-zero", "unicode-digit", "past-int64", "names"],
)
def test_keys_come_back_spelled_and_ordered_as_written(keys: list[str], as_entry: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = {"acc": {k: i / 3 for i, k in enumerate(keys)}}
    back = _same_as_json(tree, monkeypatch, tables=1)
    assert list(back["acc"]) == keys
    spec = _document(encode_state(tree))["tree"]["acc"]["__table__"]
    assert isinstance(spec["keys"], str) is as_entry, spec["keys"]


def test_each_table_has_its_own_keys_entry() -> None:
    """Shared, one entry of keys could be the rows of any number of tables in a forged file (see the reader)."""
    data = encode_state(federation(ROWS))
    specs = [t["__table__"] for t in _tables(_document(data)["tree"])]
    assert len(specs) == 4 and len({s["keys"] for s in specs}) == 4
    tables = [e for e in _entries(data) if e.startswith(checkpoint_tables.TABLE_PREFIX)]
    assert len(tables) == 4 + 4 + 1 + 1 + 1  # the keys of each, the ledger's 4 columns, acc, loss, controls
    back = decode_checkpoint(data)[0]["protocol"]
    assert list(back["ledger"]["clients"]) == list(back["local"]["acc"]) == [str(c) for c in range(ROWS)]


def _tables(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        if "__table__" in node:
            return [node]
        return [t for v in node.values() for t in _tables(v)]
    return []


def test_a_state_of_its_own_table_mark_is_written_without_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-key ``{"__table__": ...}`` dict of the state would read back as a table from a version 4 file."""
    tree = {"mine": {"__table__": {"rows": 1}}, "acc": {str(c): 0.5 for c in range(ROWS)}}
    data = encode_state(tree)
    assert _version(data) == 2
    assert_same(decode_checkpoint(data)[0], tree)
    assert data == old_encode_state(tree)


def test_a_version_4_document_past_the_inline_limit_goes_into_its_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "INLINE_MAX", 0)
    tree = federation(300)
    path = tmp_path / "checkpoint.safetensors"
    checkpoint.write_state(path, tree, {"k": 1})
    data = path.read_bytes()
    header = json.loads(_header(data)["__metadata__"]["chillfl"])
    assert header["version"] == 4 and "tree" not in header and header["round"] == 7
    assert checkpoint.DOCUMENT in _entries(data) and _version(data) == 4
    assert saved_round(path) == 7
    back, run = read_checkpoint(path)
    assert_same(back, tree)
    assert run == {"k": 1}


def test_version_3_and_2_files_still_read_and_a_table_mark_in_them_is_a_plain_key(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = {**federation(300), "mine": {"__table__": {"rows": 1, "keys": "table.0"}}}
    for inline in (0, checkpoint.INLINE_MAX):
        monkeypatch.setattr(checkpoint, "INLINE_MAX", inline)
        data, back = _json_read(tree, monkeypatch)
        assert _version(data) == (3 if inline == 0 else 2)
        assert_same(back, tree)


# ---- damaged and forged version 4 files ----


def _forged(data: bytes, edit: Callable[[dict[str, Any], dict[str, torch.Tensor]], None]) -> bytes:
    """The version 4 file ``data`` with ``edit(document, entries)`` applied and signed again (anyone can)."""
    doc = _document(data)
    assert doc["version"] == 4
    entries = safetensors.torch.load(data)
    edit(doc, entries)
    doc.pop(checkpoint.DIGEST_KEY, None)
    doc[checkpoint.DIGEST_KEY] = checkpoint._digest(checkpoint._text(doc), entries)
    return safetensors.torch.save(entries, metadata={checkpoint.METADATA_KEY: checkpoint._text(doc)})


def _spec(doc: dict[str, Any], name: str) -> dict[str, Any]:
    spec = doc["tree"]["t"][name]["__table__"]
    assert isinstance(spec, dict)
    return spec


def _set(where: Callable[[dict[str, Any]], dict[str, Any]], key: str, value: Any) -> Callable[[dict[str, Any], dict[str, torch.Tensor]], None]:
    def edit(doc: dict[str, Any], entries: dict[str, torch.Tensor]) -> None:
        where(doc)[key] = value
    return edit


def _entry(name: str, value: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[dict[str, Any], dict[str, torch.Tensor]], None]:
    def edit(doc: dict[str, Any], entries: dict[str, torch.Tensor]) -> None:
        entries[name] = value(entries[name])
    return edit


def _column(doc: dict[str, Any], name: str = "ints") -> dict[str, Any]:
    column = _spec(doc, name)["columns"][0]
    assert isinstance(column, dict)
    return column


def _bools_byte_2(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    out.view(torch.uint8)[0] = 2
    return out


FORGED: dict[str, Callable[[dict[str, Any], dict[str, torch.Tensor]], None]] = {
    "rows-more": _set(lambda d: _spec(d, "ints"), "rows", ROWS + 1),
    "rows-negative": _set(lambda d: _spec(d, "ints"), "rows", -1),
    "rows-float": _set(lambda d: _spec(d, "ints"), "rows", float(ROWS)),
    "unknown-field": _set(lambda d: _spec(d, "ints"), "code", "x"),
    "spec-a-list": _set(lambda d: d["tree"]["t"]["ints"], "__table__", [1]),
    "kind-unknown": _set(_column, "kind", "pickle"),
    "kind-float-of-ints": _set(_column, "kind", "float"),
    "kind-tensor-strides": _set(lambda d: _column(d, "rows"), "strides", [2, 1]),
    "entry-missing": _set(_column, "entry", "table.999"),
    "entry-a-leaf": _set(_column, "entry", "0"),
    "entry-twice": _set(_column, "entry", "table.0"),  # the keys' entry
    "keys-shared": lambda doc, entries: _spec(doc, "bools").__setitem__("keys", _spec(doc, "ints")["keys"]),
    "entry-not-a-name": _set(_column, "entry", 5),
    "keys-short": _set(lambda d: _spec(d, "ints"), "keys", ["a"]),
    "keys-repeat": _set(lambda d: _spec(d, "ints"), "keys", ["a"] * ROWS),
    "keys-not-str": _set(lambda d: _spec(d, "ints"), "keys", list(range(ROWS))),
    "fields-repeat": _set(lambda d: _spec(d, "rows"), "fields", ["w", "w"]),
    "fields-short": _set(lambda d: _spec(d, "rows"), "fields", ["w"]),
    "fields-empty": _set(lambda d: _spec(d, "rows"), "fields", []),
    "keys-of-floats": _entry("table.0", lambda t: t.to(torch.float64)),
    "ints-of-int32": _entry("table.1", lambda t: t.to(torch.int32)),
    "ints-short": _entry("table.1", lambda t: t[:-1].clone()),
    "bool-byte-2": lambda doc, entries: _entry(_column(doc, "bools")["entry"], _bools_byte_2)(doc, entries),
    "entry-extra": lambda doc, entries: entries.__setitem__("table.77", torch.zeros(1)),  # no table names it
    "tensor-rows-short": lambda doc, entries: _entry(_column(doc, "rows")["entry"], lambda t: t[:-1].clone())(doc, entries),
    # rows of no elements: no bytes, yet rows x fields tensors on read (a 213 KB forgery took 3.7 GB: rev112a 2)
    "tensor-no-elements": lambda doc, entries: _entry(_column(doc, "rows")["entry"], lambda t: torch.zeros(t.shape[0], 0))(doc, entries),
}


def _forgeable() -> bytes:
    g = torch.Generator().manual_seed(1)
    return encode_state({"round": 1, "x": torch.ones(2), "t": {
        "ints": {str(c): c for c in range(ROWS)},
        "bools": {str(c): c % 3 == 0 for c in range(ROWS)},
        "rows": {str(c): {"w": torch.randn(2, generator=g), "v": torch.randn(2, generator=g)} for c in range(ROWS)},
    }})


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_forged_version_4_file_is_refused_as_a_damaged_checkpoint(name: str, tmp_path: Path) -> None:
    data = _forgeable()
    assert decode_checkpoint(data)[0]["t"]["ints"]["3"] == 3  # unforged it reads
    path = tmp_path / "checkpoint.safetensors"
    path.write_bytes(_forged(data, FORGED[name]))
    with pytest.raises(CorruptCheckpoint, match="not a valid chillfl checkpoint") as caught:
        read_checkpoint(path)
    assert "\n" not in str(caught.value)


def test_a_flipped_byte_in_a_column_is_refused() -> None:
    data = _forgeable()
    start, end = _header(data)["table.1"]["data_offsets"]
    where = 8 + header_size(data) + (start + end) // 2
    with pytest.raises(Tampered):
        decode_checkpoint(data[:where] + bytes([data[where] ^ 0x01]) + data[where + 1 :])


def test_a_forged_version_4_checkpoint_ends_resume_in_one_line_exit_2(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    path = cut / CHECKPOINT
    tree, run = read_checkpoint(path)
    tree["extra"] = {str(c): c for c in range(ROWS)}  # a table, so the file is version 4
    checkpoint.write_state(path, tree, run)
    path.write_bytes(_forged(path.read_bytes(), _set(lambda d: d["tree"]["extra"]["__table__"], "rows", 3)))
    assert main(["resume", str(cut)]) == 2
    _one_line_error(capsys, "checkpoint", "not a valid chillfl checkpoint")


# ---- a real run ----


@pytest.mark.parametrize(
    "method, sampled, rows",
    [("algorithm.scaffold", 300, ROWS), ("algorithm.fedavg", 300, ROWS), ("algorithm.scaffold", 5, 2), ("algorithm.feddyn", 5, 2)],
)
def test_a_300_client_run_resumes_bitwise_from_version_4_checkpoints(method: str, sampled: int, rows: int, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client sampled: the ledger, ``local.acc``/``local.loss`` and SCAFFOLD's control variates are tables of
    the clients that hold training rows (294 of the 300), so every checkpoint is version 4. A few sampled: the tables
    are a few rows, made tables by a lower threshold, and grow a round."""
    monkeypatch.setattr(checkpoint_tables, "TABLE_MIN_ROWS", rows)
    encode, versions = checkpoint.encode_state, []

    def encode_seen(*args: Any, **kwargs: Any) -> bytes:
        data = encode(*args, **kwargs)
        versions.append(_version(data))
        return data

    monkeypatch.setattr(checkpoint, "encode_state", encode_seen)
    check_resume(method, "sequential", 1, tmp_path, monkeypatch, **{"federation.num_clients": 300, "federation.clients_per_round": sampled})
    assert versions and set(versions) == {4}, versions

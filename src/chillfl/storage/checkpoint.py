"""On-disk format of run checkpoints: one safetensors file, JSON skeleton in its metadata (or, when large, an entry).

A state tree (what the ``state_dict()`` methods return: dicts with string
keys, lists, tensors, int, float, str, bool, None) is split into

* its tensors, named ``"0"``, ``"1"``, ... (position in a depth-first walk;
  state keys such as ``"fc.weight"`` never become tensor names, so any key is
  allowed). A tensor of more than :data:`PACK_MAX_NUMEL` elements is a
  safetensors entry of its own under that name; the smaller ones are packed,
  flattened, into one 1-D entry per dtype, ``"packed.<dtype>"`` (e.g.
  ``"packed.float32"``), and the document's ``"slots"`` maps each such name to
  ``[entry, offset, numel, shape]`` (version 2);
* a JSON skeleton of everything else, stored in the safetensors header
  metadata under ``"chillfl"``, where a tensor leaf is ``{"__tensor__": name}``
  and a non-finite float is ``{"__float__": "nan" | "inf" | "-inf"}`` (strict
  JSON has no NaN; a NaN with another sign or payload than Python's own is
  ``"nan:<hex bits>"``; finite floats are written with ``repr``, which Python
  reads back exactly).

Choices
-------
* Loading executes no code: safetensors + ``json`` only (no pickle), so a
  checkpoint from elsewhere is safe to open.
* One file, written atomically (:func:`write_atomic`): the bytes go to
  ``<name>.tmp`` in the same folder, created with ``O_EXCL | O_NOFOLLOW`` (a
  stale ``.tmp`` from a crash is unlinked first, a link planted there is
  removed, never written through), are fsynced, renamed onto the target with
  ``os.replace`` and the folder is fsynced, so a crash leaves either the old
  checkpoint or the new one, never a torn file. A failed write (disk full)
  removes its ``.tmp`` and raises :class:`~chillfl.errors.StorageError`.
* Tamper evidence: the skeleton's ``sha256`` is a SHA-256 of the rest of
  the skeleton (with ``run``: what the runner records of the config and the
  metrics written so far) and of every tensor's name,
  dtype, shape and bytes; :func:`read_checkpoint` recomputes it, always: a
  mismatch is a torn or bit-flipped file, which no resume may use
  (``--force`` overrides edits of config.toml or metrics.jsonl, the user's
  own, never this). Files without it (older versions) are read unverified.
* The file is read into memory before parsing: safetensors' ``safe_open``
  memory-maps the file and hands out tensors backed by it, which would alias
  the next checkpoint written over the same path.
* A dense tensor that is not contiguous (the vectorised executor's
  transposed client weights) comes back with its strides (``"strides"`` in
  the metadata): the same values in another layout add up in another order
  downstream, so a resumed run would differ in the last bits. Tensors with
  gaps come back contiguous.
* Small tensors are packed (version 2). Why: per-client states (control
  variates, personal models, per-client scalars) are thousands of tiny
  tensors, and the cost of writing, hashing and reading a checkpoint went by
  the number of tensors, not by bytes (safetensors handles each entry in
  Python): 1400 clients' 2.5 MB took 0.4 s a checkpoint. A packed tensor is
  read back as a tensor of its own (a copy of its slice: no two tensors share
  storage, and saving one client's state does not write the whole buffer),
  with the same dtype, shape, strides and bytes as one written on its own, so
  a resumed run stays bitwise equal to an uninterrupted one. Large tensors
  (a model's weights) stay entries of their own: packing them would copy them
  once more on both write and read. Version 1 files (one entry per tensor,
  no ``"slots"``) are read as before.
* A document (skeleton, slots, strides, run metadata) of more than
  :data:`INLINE_MAX` bytes goes into a 1-D uint8 entry ``"chillfl.document"``
  of its ASCII JSON, the same document with ``"version": 3`` (the text written
  to measure it, its version digit changed: a 200 MB document is serialized
  once, not twice); the header's
  ``"chillfl"`` metadata then holds ``{"version": 3, "round": R, "sha256": ...}``
  only (the checksum covers that entry as any other). Why: safetensors refuses
  a header of more than 100 MB, and the skeleton grows with every client ever
  sampled (the ledger's per-client totals, ``local.acc``, a slot per packed
  per-client tensor: 130-420 B a client), so a federation of a few hundred
  thousand clients could write no checkpoint, and no resume got past it.
  Smaller documents stay in the header (version 2, the bytes older chillfl
  versions write and read).
* Per-client tables as columns (version 4, :mod:`chillfl.storage.checkpoint_tables`): a mapping of at least
  :data:`~chillfl.storage.checkpoint_tables.TABLE_MIN_ROWS` string keys whose values are all ints, all floats, all
  bools, all tensors of one dtype, shape and layout, or all dicts of one key order whose fields are such columns, is
  one entry a column (``"table.<n>"``: int64, float64, bool, or the tensors stacked), its keys one int64 entry when
  each is a canonical decimal integer (else a JSON list), and ``{"__table__": {...}}`` in the skeleton. Why: at
  10^6 clients the JSON of such tables (the walk, ``json.dumps``, the hash, the parse: a node per value) cost
  about 17.5 s of CPU a write. A read gives back exactly what the JSON gave (int, bool, float with every bit, NaN
  payloads and ``-0.0`` included; key order and spelling; a tensor's dtype, shape, strides and own storage), so a
  resumed run stays bitwise. A file without such a table is written as before (version 2 or 3, the same bytes), so
  small runs' checkpoints do not change; one whose tree holds a one-key ``{"__table__": ...}`` dict of its own is
  written without tables (version 4 would read that dict as a mark). Its document sits in the header or, past
  :data:`INLINE_MAX`, in :data:`DOCUMENT` (a header without ``"tree"``), as in versions 2 and 3; a chillfl that reads
  only versions 1-3 refuses the file as an unsupported layout.
* The cyclic garbage collector is paused while a checkpoint is encoded or
  decoded (:func:`_collector_paused`): the walks build an object a node, and
  for 10^5 clients its full collections over the whole heap were about 40 %
  of a write.
* Tuples, numpy values and other objects are rejected on write rather than
  silently turned into lists or strings, since they would not come back as
  they were.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import math
import os
import struct
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence, cast

import safetensors
import safetensors.torch
import torch

from chillfl.paths import O_CLOEXEC, O_NOFOLLOW, shell_path
from chillfl.errors import MAX_JSON_DEPTH, ConfigError, StorageError, json_loads
from chillfl.storage.checkpoint_tables import TABLE_MARK, TABLE_PREFIX, TableReader, TableWriter
from chillfl.storage.checkpoint_tables import dense_layout as _dense_layout
from chillfl.storage.checkpoint_tables import is_dense as _is_dense

FORMAT_VERSION = 2
FORMAT_VERSION_OUTSIDE = 3
"""Version 2 with its document in the tensor entry :data:`DOCUMENT` rather than in the header (see the module docstring)."""
FORMAT_VERSION_TABLES = 4
"""Version 2/3 with per-client tables as columns (:mod:`chillfl.storage.checkpoint_tables`); its document in the
header, or, past :data:`INLINE_MAX`, in :data:`DOCUMENT` (the header then has no ``"tree"``)."""
_READABLE_VERSIONS = (1, 2, 3, 4)  # 1: one safetensors entry per tensor, no "slots"
DOCUMENT = "chillfl.document"
"""The entry (1-D uint8, the document's ASCII JSON) of a version 3 file (and of a large version 4 one); no tensor of a tree
is named so (``"0"``, ``"packed.*"``, ``"table.*"``)."""
INLINE_MAX = 1 << 20
"""A document of at most this many bytes goes into the header (version 2), a larger one into :data:`DOCUMENT` (version 3)."""
PACK_MAX_NUMEL = 65536
"""Tensors of at most this many elements are packed into one entry per dtype (see the module docstring)."""
PACK_PREFIX = "packed."
METADATA_KEY = "chillfl"
DIGEST_KEY = "sha256"
TENSOR_MARK = "__tensor__"
FLOAT_MARK = "__float__"
_RESERVED = frozenset({TENSOR_MARK, FLOAT_MARK})
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_NAN_BITS = struct.unpack("<Q", struct.pack("<d", math.nan))[0]
_MAX_HEADER = 100_000_000  # safetensors' own header limit


class UnstorableState(TypeError):
    """A value of a state tree the checkpoint format cannot hold (an int key, a tuple, a numpy array); ``where`` is its
    dotted path in the tree (``protocol.aggregator.seen``), so that the run can name the part whose ``state_dict`` made it."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where


def _encode(
    node: Any, tensors: dict[str, torch.Tensor], where: str, layouts: dict[str, list[int]], small: list[tuple[str, torch.Tensor]], level: int = 2,
    tables: TableWriter | None = None,
) -> Any:
    """JSON skeleton of ``node``; large tensors are moved into ``tensors`` (CPU, contiguous, own storage), small ones
    (at most :data:`PACK_MAX_NUMEL` elements) are listed in ``small`` (detached, not yet copied: :func:`_pack` copies
    them), the strides of dense non-contiguous ones go into ``layouts``. ``level``: how deep ``node``'s skeleton sits in the metadata
    document (the tree, its ``"tree"``, at 2); a list or object past :data:`~chillfl.errors.MAX_JSON_DEPTH` is refused
    here, on write, since reading the checkpoint back would refuse it. ``tables``: where a mapping that qualifies as a
    table (:mod:`~chillfl.storage.checkpoint_tables`) goes, its mark returned instead; None: no tables (version 2/3)."""
    marked = isinstance(node, (torch.Tensor, Mapping, list)) or (type(node) is float and not math.isfinite(node))
    if marked and level > MAX_JSON_DEPTH:  # each becomes a JSON list or object one level deeper than its parent
        raise UnstorableState(where, f"state at {where} is nested too deeply to checkpoint (its skeleton may nest {MAX_JSON_DEPTH} levels)")
    if isinstance(node, torch.Tensor):
        if node.layout is not torch.strided or node.is_nested or node.is_meta:  # no bytes to store: the part's state, not the disk
            kind = "nested" if node.is_nested else "meta" if node.is_meta else str(node.layout).removeprefix("torch.")
            raise UnstorableState(where, f"cannot checkpoint a {kind} tensor at {where or '<root>'}: store a dense (strided) tensor")
        if node.is_quantized:  # safetensors has no quantized dtypes: was a KeyError traceback (torch.qint8) from its save
            raise UnstorableState(where, f"cannot checkpoint a quantized tensor at {where or '<root>'}: store its int_repr() and its "
                                         "quantization parameters, or its dequantize()d values")
        name = str(len(tensors) + len(small))
        if node.numel() <= PACK_MAX_NUMEL:
            small.append((name, node.detach()))
        else:  # a fresh copy: safetensors refuses tensors sharing storage, and the caller may keep mutating its own
            tensors[name] = node.detach().to("cpu", copy=True, memory_format=torch.contiguous_format)
        if (stride := _dense_layout(node)) is not None:
            layouts[name] = stride
        return {TENSOR_MARK: name}
    if isinstance(node, Mapping):
        if tables is not None:
            if (mark := tables.mark(node, level, MAX_JSON_DEPTH)) is not None:
                return mark
            tables.clash = tables.clash or (len(node) == 1 and TABLE_MARK in node)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                raise UnstorableState(where, f"state key {key!r} at {where or '<root>'} is not a string")
            if key in _RESERVED and len(node) == 1:
                raise ValueError(f"state key {key!r} at {where or '<root>'} is reserved by the checkpoint format")
            out[key] = _encode(value, tensors, f"{where}.{key}" if where else key, layouts, small, level + 1, tables)
        return out
    if isinstance(node, list):
        return [_encode(v, tensors, f"{where}[{i}]", layouts, small, level + 1, tables) for i, v in enumerate(node)]
    # exact types: subclasses (numpy floats, IntEnum) would come back as the plain type
    if node is None or type(node) in (bool, int, str):
        return node
    if type(node) is float:
        if math.isfinite(node):
            return node
        return {FLOAT_MARK: _nonfinite_name(node)}
    raise UnstorableState(where, f"cannot checkpoint {type(node).__name__} at {where or '<root>'}: use dict/list/tensor/int/float/str/bool/None")


def _pack(small: Sequence[tuple[str, torch.Tensor]], tensors: dict[str, torch.Tensor]) -> dict[str, list[Any]]:
    """Copy the ``small`` tensors, flattened in row-major order (as a contiguous copy lays them out), into one CPU buffer
    per dtype, added to ``tensors`` as ``"packed.<dtype>"``; returns each one's slot ``[buffer, offset, numel, shape]``.
    One ``torch.cat`` per dtype is the only copy (a contiguous tensor's ``reshape(-1)`` is a view)."""
    groups: dict[torch.dtype, list[tuple[str, torch.Tensor]]] = {}
    for name, t in small:
        groups.setdefault(t.dtype, []).append((name, t))
    slots: dict[str, list[Any]] = {}
    for dtype, members in groups.items():
        buffer = PACK_PREFIX + str(dtype).removeprefix("torch.")
        parts = [t.reshape(-1) for _, t in members]
        if len({p.device for p in parts}) > 1:  # torch.cat wants one device
            parts = [p.to("cpu") for p in parts]
        # cat always allocates: the buffer never aliases the caller's tensors
        tensors[buffer] = torch.cat(parts).to("cpu")
        offset = 0
        for (name, t), part in zip(members, parts):
            slots[name] = [buffer, offset, part.numel(), list(t.shape)]
            offset += part.numel()
    return dict(sorted(slots.items(), key=lambda kv: (len(kv[0]), kv[0])))


def _unpack(slots: Any, stored: Mapping[str, torch.Tensor], strides: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The packed tensors of a version 2 file, each a copy of its slice (own storage, no more than its own bytes) with
    the strides written for it (taken out of ``strides``); ValueError on a malformed slot."""
    if not isinstance(slots, dict):
        raise ValueError("malformed slots")
    out: dict[str, torch.Tensor] = {}
    for name, slot in slots.items():
        if not (isinstance(slot, list) and len(slot) == 4 and isinstance(slot[0], str) and isinstance(slot[3], list)):
            raise ValueError(f"malformed slot for tensor {name!r}")
        buffer, offset, numel, shape = slot
        flat = stored.get(buffer) if buffer.startswith(PACK_PREFIX) else None
        if (
            flat is None
            or flat.dim() != 1
            or not all(type(n) is int and n >= 0 for n in (offset, numel, *shape))
            or offset + numel > flat.numel()
            or math.prod(shape) != numel
            or math.prod(max(size, 1) for size in shape) >= 2**63  # a 0 in the shape hid the others from the product: torch's own overflows
        ):
            raise ValueError(f"malformed slot for tensor {name!r}")
        # its row-major strides (one call instead of a slice and a view: this loop runs once a small tensor)
        row_major, step = [], 1
        for size in reversed(shape):
            row_major.append(step)
            step *= max(size, 1)
        piece = flat.as_strided(shape, row_major[::-1], flat.storage_offset() + offset)
        stride = strides.pop(name, None)
        if stride is None:
            out[name] = piece.clone(memory_format=torch.contiguous_format)
        elif isinstance(stride, list) and _is_dense(shape, stride):
            out[name] = torch.empty_strided(shape, stride, dtype=flat.dtype).copy_(piece)
        else:
            raise ValueError(f"malformed strides for tensor {name!r}")
    return out


def _nonfinite_name(value: float) -> str:
    """``"inf"``, ``"-inf"``, ``"nan"``, or ``"nan:<64-bit pattern>"`` for a NaN whose sign/payload is not Python's own."""
    if not math.isnan(value):
        return "inf" if value > 0 else "-inf"
    pattern = struct.unpack("<Q", struct.pack("<d", value))[0]
    return "nan" if pattern == _NAN_BITS else f"nan:{pattern:016x}"


def _nonfinite_value(name: object) -> float:
    """The float a ``{"__float__": name}`` mark stands for (:func:`_nonfinite_name`); anything else it could say is a
    ValueError (a corrupt file). Why: the checksum is recomputable, so a crafted file passes it, and a mark of ``5`` or
    ``"nan:" + 20 hex digits`` ended ``resume`` / ``load_run`` in an AttributeError or a struct.error traceback."""
    if not isinstance(name, str):
        raise ValueError(f"a non-finite float mark is {type(name).__name__}, not a name")
    if name.startswith("nan:"):
        bits = name[4:]
        if len(bits) != 16 or any(c not in "0123456789abcdef" for c in bits):
            raise ValueError(f"a NaN mark {name[:40]!r} is not 'nan:' and 16 hex digits")
        value = float(struct.unpack("<d", struct.pack("<Q", int(bits, 16)))[0])
        if not math.isnan(value):
            raise ValueError(f"a NaN mark {name!r} holds the bits of a number")
        return value
    if name not in _NONFINITE:
        raise ValueError(f"a non-finite float mark {name[:40]!r} is none of inf, -inf, nan")
    return _NONFINITE[name]


def _decode(node: Any, tensors: Mapping[str, torch.Tensor], tables: TableReader | None = None) -> Any:
    """The tree a skeleton stands for; ``tables``: a version 4 file's (before it, ``"__table__"`` is a plain key)."""
    if isinstance(node, dict):
        if len(node) == 1 and TENSOR_MARK in node:
            return tensors[node[TENSOR_MARK]]
        if len(node) == 1 and FLOAT_MARK in node:
            return _nonfinite_value(node[FLOAT_MARK])
        if tables is not None and len(node) == 1 and TABLE_MARK in node:
            return tables.read(node[TABLE_MARK])
        return {k: _decode(v, tensors, tables) for k, v in node.items()}
    if isinstance(node, list):
        return [_decode(v, tensors, tables) for v in node]
    return node


def _digest(text: str, tensors: Mapping[str, torch.Tensor]) -> str:
    """SHA-256 of a checkpoint's content: its metadata text (skeleton and run metadata), each tensor's name, dtype, shape and bytes."""
    h = hashlib.sha256()
    h.update(len(text).to_bytes(8, "little") + text.encode("utf-8"))
    for name in sorted(tensors, key=lambda n: (len(n), n)):
        t = tensors[name].detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}:".encode("ascii"))
        if t.numel():
            h.update(cast(Any, t.reshape(-1).view(torch.uint8).numpy()))  # an ndarray is a buffer (no copy); mypy cannot tell
    return h.hexdigest()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused while a checkpoint is encoded or decoded, and resumed after (unless it was off).

    Why: the walks build a new object (a skeleton dict, a slot list, a decoded value) for every node of the state,
    millions for a federation of 10^5-10^6 clients, and past a quarter of the live objects each full collection walks
    the whole heap again, the run's own state included: at 10^5 synthetic clients the collector took about 1.3 s of
    a 3 s write and 0.3 s of a 1.5 s read. Nothing the walks build is a cycle, so pausing frees nothing later
    (``chillfl._torch`` pauses it around torch's import for the same reason).

    The main thread's alone: the collector is the process's, and two threads pausing it at once could each see it off
    and leave it off for good (a review left it so in 77 of 200 two-thread trials); another thread's walk runs with
    the collector as it finds it."""
    enabled = gc.isenabled() and threading.current_thread() is threading.main_thread()
    try:
        if enabled:
            gc.disable()
        yield
    finally:
        if enabled:
            gc.enable()


def encode_state(tree: Mapping[str, Any], run: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of a checkpoint file for ``tree`` (see the module docstring); ``run``: JSON-able run metadata.

    Everything goes into ONE metadata entry: safetensors keeps the header's
    metadata in a hash map whose order is random per process, so a file with
    several entries had other bytes on every write (a resumed run's files then
    differed from the uninterrupted run's, values equal).

    Small tensors are packed into one entry per dtype (``"slots"`` in the
    document; see the module docstring), so the cost goes by bytes, not by the
    number of tensors.
    """
    with _collector_paused():
        return _encoded(tree, run)


def _encoded(tree: Mapping[str, Any], run: Mapping[str, Any] | None) -> bytes:
    """:func:`encode_state`'s work, the collector paused: version 4 when a table qualifies, else version 2/3 as before."""
    tables: TableWriter | None = TableWriter(_RESERVED)
    while True:
        tensors: dict[str, torch.Tensor] = {}
        layouts: dict[str, list[int]] = {}
        small: list[tuple[str, torch.Tensor]] = []
        skeleton = _encode(tree, tensors, "", layouts, small, 2, tables)
        if tables is None or not tables.clash or not tables.entries:
            break
        tables = None  # the tree's own {"__table__": ...} would read back as a table: written without tables
    slots = _pack(small, tensors)
    version = FORMAT_VERSION_TABLES if tables is not None and tables.entries else FORMAT_VERSION
    if version == FORMAT_VERSION_TABLES and tables is not None:
        tensors.update(tables.entries)
    doc: dict[str, Any] = {"version": version, "tree": skeleton, **({"strides": layouts} if layouts else {})}
    if slots:
        doc["slots"] = slots
    doc["run"] = dict(sorted(dict(run or {}).items()))
    text = _text(doc)
    if len(text) > INLINE_MAX:  # ASCII (json.dumps escapes the rest): characters are bytes
        outside = _outside(text) if version == FORMAT_VERSION else bytearray(text, "ascii")
        tensors[DOCUMENT] = torch.frombuffer(outside, dtype=torch.uint8)
        del text, outside  # the document's other copies (hundreds of MB for a big federation)
        done = skeleton.get("round") if isinstance(skeleton, dict) else None
        version = FORMAT_VERSION_OUTSIDE if version == FORMAT_VERSION else version
        doc = {"version": version, **({"round": done} if type(done) is int else {})}
        text = _text(doc)
    doc[DIGEST_KEY] = _digest(text, tensors)
    return safetensors.torch.save(tensors, metadata={METADATA_KEY: _text(doc)})


def _outside(text: str) -> bytearray:
    """The bytes of the version 3 entry :data:`DOCUMENT` for the version 2 document ``text``: the same text with its
    version, its first field, made 3 (one digit for another, nothing else moves).

    Why patched, not encoded again: the document of a federation of 10^5-10^6 clients is 20-200 MB of JSON, and
    ``json.dumps`` of it took about a quarter of the checkpoint's write; a second one, with ``"version"`` changed,
    cost that once more every checkpoint."""
    data = bytearray(text, "ascii")
    head = b'{"version":%d,' % FORMAT_VERSION
    if not data.startswith(head):  # cannot be: _text keeps the document's order, and encode_state puts "version" first
        raise RuntimeError(f"a checkpoint document starts with {bytes(data[:len(head)])!r}, not {head!r}")
    data[len(head) - 2 : len(head) - 1] = b"%d" % FORMAT_VERSION_OUTSIDE
    return data


def _text(doc: Mapping[str, Any]) -> str:
    """The one JSON spelling of a metadata document (reading it back and writing it again gives the same text)."""
    return json.dumps(doc, allow_nan=False, separators=(",", ":"))


def _header_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` table of a safetensors header (8-byte little-endian length, then JSON)."""
    if len(data) < 8:
        raise ValueError("file shorter than a safetensors header")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(_MAX_HEADER, len(data) - 8):
        raise ValueError("safetensors header length is out of range")
    header = json_loads(data[8 : 8 + size])
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict):
        raise ValueError("no metadata in the safetensors header")
    return meta


def saved_round(path: Path) -> int | None:
    """The round the checkpoint at ``path`` was taken after, read from its header alone (no tensor read, no
    checksum verified: ``chillfl status`` only tells where a stopped run resumes); None when missing or unreadable."""
    try:
        with Path(path).open("rb") as fh:
            head = fh.read(8)
            size = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
            doc = json_loads(_header_metadata(head + fh.read(min(size, _MAX_HEADER)))[METADATA_KEY])
    except (OSError, ValueError, KeyError):
        return None
    if not isinstance(doc, dict):
        return None
    tree = doc.get("tree")
    done = tree.get("round") if isinstance(tree, dict) else doc.get("round")  # version 3: the header's copy of it
    return done if type(done) is int else None


class Tampered(ValueError):
    """The checkpoint's content does not match its own checksum: changed after it was written."""


_UNSUPPORTED = f"unsupported checkpoint layout (expected version {' or '.join(map(str, _READABLE_VERSIONS))})"


def _document(header: Mapping[str, Any], stored: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The document of a version 3 file (or a version 4 one without its tree in the header), taken out of ``stored``
    (its entry :data:`DOCUMENT` is no tensor of the tree); ValueError when it is missing or malformed, has another
    version than the header, or says another round than the header (which ``chillfl status`` shows)."""
    entry = stored.pop(DOCUMENT, None)
    if entry is None or entry.dtype != torch.uint8 or entry.dim() != 1:
        raise ValueError(f"no {DOCUMENT!r} entry of bytes in a version {header['version']} checkpoint")
    doc = json_loads(entry.numpy().tobytes())
    version = doc.get("version") if isinstance(doc, dict) else None
    if type(version) is not int or version != header["version"] or not isinstance(doc.get("tree"), dict):
        raise ValueError(_UNSUPPORTED)
    if "round" in header and doc["tree"].get("round") != header["round"]:
        raise ValueError("the round in its header is not its state's")
    return cast(dict[str, Any], doc)


def decode_checkpoint(data: bytes, device: str | torch.device = "cpu") -> tuple[dict[str, Any], dict[str, Any]]:
    """Inverse of :func:`encode_state`: ``(tree, run metadata)``; ValueError (or a safetensors error) on malformed
    bytes, :class:`Tampered` when the checksum does not match (there is no unverified read: what a changed byte
    decodes to is no state any round wrote, and resuming from it gives results no run of the config gives).

    A header or skeleton nested deeper than :data:`~chillfl.errors.MAX_JSON_DEPTH` is refused by
    :func:`~chillfl.errors.json_loads` before it is parsed, so the walks over it here never reach Python's recursion
    limit, whatever it is set to (a damaged file, never a RecursionError or a crash)."""
    with _collector_paused():
        return _decoded(data, device)


def _decoded(data: bytes, device: str | torch.device) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`decode_checkpoint`'s work, the collector paused."""
    meta = _header_metadata(data)
    if METADATA_KEY not in meta:
        raise ValueError("not a chillfl checkpoint (no 'chillfl' metadata)")
    doc = json_loads(meta[METADATA_KEY])
    version = doc.get("version") if isinstance(doc, dict) else None
    # its tree is in an entry, read below
    outside = version == FORMAT_VERSION_OUTSIDE or (version == FORMAT_VERSION_TABLES and isinstance(doc, dict) and "tree" not in doc)
    if type(version) is not int or version not in _READABLE_VERSIONS or not (outside or isinstance(doc.get("tree"), dict)):
        raise ValueError(_UNSUPPORTED)
    stored = safetensors.torch.load(data)
    digest = doc.pop(DIGEST_KEY, None)
    if digest is not None and _digest(_text(doc), stored) != digest:
        raise Tampered("its content does not match the checksum written with it (a torn or changed file)")
    if outside:
        doc = _document(doc, stored)
    run = doc.get("run", {})
    if not isinstance(run, dict):
        raise ValueError("malformed run metadata")
    strides = dict(doc.get("strides") or {})
    if version >= 2:  # packed tensors; the buffers themselves are no leaves
        packed = _unpack(doc.get("slots", {}), stored, strides)
        columns = version >= FORMAT_VERSION_TABLES  # the table entries are no leaves either
        tensors = {k: v for k, v in stored.items() if not k.startswith(PACK_PREFIX) and not (columns and k.startswith(TABLE_PREFIX))}
        if tensors.keys() & packed.keys():
            raise ValueError("a tensor is both packed and an entry of its own")
        tensors.update(packed)
    else:
        tensors = stored
    for name, stride in strides.items():  # the layouts written: same values, same strides
        t = tensors.get(name)
        if t is None or not isinstance(stride, list) or not _is_dense(t.shape, stride):
            raise ValueError(f"malformed strides for tensor {name!r}")
        tensors[name] = torch.empty_strided(t.shape, stride, dtype=t.dtype).copy_(t)
    if str(torch.device(device)) != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    if version < FORMAT_VERSION_TABLES:
        return _decode(doc["tree"], tensors), run
    tables = TableReader({k: v for k, v in stored.items() if k.startswith(TABLE_PREFIX)}, torch.device(device))
    tree = _decode(doc["tree"], tensors, tables)
    tables.check_all_used()
    return tree, run


def decode_state(data: bytes, device: str | torch.device = "cpu") -> dict[str, Any]:
    """The state tree of a checkpoint's bytes (checksum verified)."""
    return decode_checkpoint(data, device)[0]


NO_FSYNC = "CHILLFL_NO_FSYNC"
"""``CHILLFL_NO_FSYNC=1``: :func:`write_atomic` skips its two fsyncs; the write stays atomic (``.tmp``, then ``os.replace``).

Why: for a test suite (tests/conftest.py sets it), whose run folders are deleted seconds later: each fsync waits
for the disk (milliseconds; thousands of them a suite). A killed process still leaves the old file or the new one,
since the kernel holds what was written; only a crash of the machine itself could lose the unsynced bytes.
"""


def _durable() -> bool:
    return os.environ.get(NO_FSYNC) != "1"


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable; not every platform can open a folder (Windows), which is then skipped."""
    if not _durable():
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, never through a link; disk full or any I/O error is a StorageError.

    The ``.tmp`` file is created with ``O_EXCL | O_NOFOLLOW`` after any stale
    one (or a link planted in its place) is unlinked, and is removed again
    when the write fails: no 0-byte ``.tmp`` is left, and the old ``path``
    stays as it was.
    """
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | O_NOFOLLOW | O_CLOEXEC
    try:
        tmp.unlink(missing_ok=True)  # removes a link itself, never its target
        fd = os.open(tmp, flags, 0o644)
    except OSError as exc:
        raise StorageError(f"cannot write {tmp}: {exc.strerror or exc}") from exc
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if _durable():
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        what = "no space left on the device" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
        raise StorageError(f"cannot write {path}: {what}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_state(path: Path, tree: Mapping[str, Any], run: Mapping[str, Any] | None = None) -> None:
    """Write ``tree`` (and ``run`` metadata) to ``path`` atomically: a reader sees the previous file or the complete new one."""
    write_atomic(Path(path), encode_state(tree, run))


def _one_line(exc: object) -> str:
    """ConfigError messages are printed as one line by the CLI."""
    return " ".join(str(exc).split()) or type(exc).__name__


class CorruptCheckpoint(ConfigError):
    """A checkpoint no resume may use, ``--force`` or not: torn, bit-flipped (its bytes do not match the checksum
    written with them), or no chillfl checkpoint at all.

    A run folder keeps one checkpoint, so there is no earlier one to go back to: the run starts again. How depends on
    where it is (a run of its own, or a run of a comparison), so a caller that knows says so with :meth:`restart`.
    ``path``: the file; ``why``: what is wrong with it.
    """

    def __init__(self, path: Path, why: str, restart: str | None = None) -> None:
        self.path, self.why = Path(path), why
        again = restart or f"start the run again (`chillfl run {shell_path(self.path.parent / 'config.toml')}`)"
        super().__init__("checkpoint", f"{self.path}: {why}; it cannot be resumed, with --force or without: {again}")

    def restart(self, how: str) -> CorruptCheckpoint:
        """The same error with another way to start the run again (``how``)."""
        return CorruptCheckpoint(self.path, self.why, how)


def read_checkpoint(path: Path, device: str | torch.device = "cpu") -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tree, run metadata)`` of a checkpoint written by :func:`write_state`; missing, corrupt (torn, or not a
    checkpoint) or changed files (bytes that do not match the checksum written with them) raise ConfigError on field
    ``checkpoint`` (:class:`CorruptCheckpoint` but for an unreadable file), whatever ``--force`` says."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError("checkpoint", f"cannot read {path}: {_one_line(exc.strerror or exc)}") from exc
    try:
        return decode_checkpoint(data, device)
    except Tampered as exc:
        raise CorruptCheckpoint(path, str(exc)) from exc
    # malformed input can fail in json, struct, safetensors or the skeleton walk; all mean "corrupt file"
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, safetensors.SafetensorError) as exc:
        raise CorruptCheckpoint(path, f"not a valid chillfl checkpoint ({_one_line(exc)})") from exc


def read_state(path: Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`write_state`; missing, corrupt or changed files raise ConfigError."""
    return read_checkpoint(path, device)[0]

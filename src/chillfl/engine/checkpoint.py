"""On-disk format of run checkpoints: one safetensors file, JSON skeleton in its metadata.

A state tree (what the ``state_dict()`` methods return: dicts with string
keys, lists, tensors, int, float, str, bool, None) is split into

* its tensors, written as the safetensors payload under the names
  ``"0"``, ``"1"``, ... (position in a depth-first walk; state keys such as
  ``"fc.weight"`` never become tensor names, so any key is allowed);
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
* One file, written atomically: the bytes go to ``<name>.tmp`` in the same
  folder, are fsynced, renamed onto the target with ``os.replace`` and the
  folder is fsynced, so a crash leaves either the old checkpoint or the new
  one, never a torn file. A stale ``.tmp`` from a crash is simply overwritten.
* The file is read into memory before parsing: safetensors' ``safe_open``
  memory-maps the file and hands out tensors backed by it, which would alias
  the next checkpoint written over the same path.
* A dense tensor that is not contiguous (the vectorised executor's
  transposed client weights) comes back with its strides (``"strides"`` in
  the metadata): the same values in another layout add up in another order
  downstream, so a resumed run would differ in the last bits. Tensors with
  gaps come back contiguous.
* Tuples, numpy values and other objects are rejected on write rather than
  silently turned into lists or strings, since they would not come back as
  they were.
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path
from typing import Any, Mapping, Sequence

import safetensors
import safetensors.torch
import torch

from chillfl.errors import ConfigError

FORMAT_VERSION = 1
METADATA_KEY = "chillfl"
TENSOR_MARK = "__tensor__"
FLOAT_MARK = "__float__"
_RESERVED = frozenset({TENSOR_MARK, FLOAT_MARK})
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_NAN_BITS = struct.unpack("<Q", struct.pack("<d", math.nan))[0]
_MAX_HEADER = 100_000_000  # safetensors' own header limit


def _is_dense(shape: Sequence[int], stride: Sequence[Any]) -> bool:
    """Whether ``stride`` lays ``shape`` out without gaps or overlaps (each stride the product of the faster sizes)."""
    if len(stride) != len(shape) or not all(type(s) is int and s > 0 for s in stride):
        return False
    expected = 1
    for d in sorted(range(len(shape)), key=lambda d: stride[d]):
        if shape[d] != 1 and stride[d] != expected:
            return False
        expected *= shape[d]
    return True


def _dense_layout(t: torch.Tensor) -> list[int] | None:
    """The strides of ``t`` if it is dense but not contiguous (e.g. transposed), else None (written contiguous)."""
    if t.is_contiguous() or t.numel() == 0 or not _is_dense(t.shape, t.stride()):
        return None
    return list(t.stride())


def _encode(node: Any, tensors: dict[str, torch.Tensor], where: str, layouts: dict[str, list[int]]) -> Any:
    """JSON skeleton of ``node``; tensors are moved into ``tensors`` (CPU, contiguous, own storage), the strides
    of dense non-contiguous ones into ``layouts``."""
    if isinstance(node, torch.Tensor):
        name = str(len(tensors))
        # a fresh copy: safetensors refuses tensors sharing storage, and the caller may keep mutating its own
        tensors[name] = node.detach().to("cpu", copy=True, memory_format=torch.contiguous_format)
        if (stride := _dense_layout(node)) is not None:
            layouts[name] = stride
        return {TENSOR_MARK: name}
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if not isinstance(key, str):
                raise TypeError(f"state key {key!r} at {where or '<root>'} is not a string")
            if key in _RESERVED and len(node) == 1:
                raise ValueError(f"state key {key!r} at {where or '<root>'} is reserved by the checkpoint format")
            out[key] = _encode(value, tensors, f"{where}.{key}" if where else key, layouts)
        return out
    if isinstance(node, list):
        return [_encode(v, tensors, f"{where}[{i}]", layouts) for i, v in enumerate(node)]
    # exact types: subclasses (numpy floats, IntEnum) would come back as the plain type
    if node is None or type(node) in (bool, int, str):
        return node
    if type(node) is float:
        if math.isfinite(node):
            return node
        return {FLOAT_MARK: _nonfinite_name(node)}
    raise TypeError(f"cannot checkpoint {type(node).__name__} at {where or '<root>'}: use dict/list/tensor/int/float/str/bool/None")


def _nonfinite_name(value: float) -> str:
    """``"inf"``, ``"-inf"``, ``"nan"``, or ``"nan:<64-bit pattern>"`` for a NaN whose sign/payload is not Python's own."""
    if not math.isnan(value):
        return "inf" if value > 0 else "-inf"
    pattern = struct.unpack("<Q", struct.pack("<d", value))[0]
    return "nan" if pattern == _NAN_BITS else f"nan:{pattern:016x}"


def _nonfinite_value(name: str) -> float:
    if name.startswith("nan:"):
        return float(struct.unpack("<d", struct.pack("<Q", int(name[4:], 16)))[0])
    return _NONFINITE[name]


def _decode(node: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    if isinstance(node, dict):
        if len(node) == 1 and TENSOR_MARK in node:
            return tensors[node[TENSOR_MARK]]
        if len(node) == 1 and FLOAT_MARK in node:
            return _nonfinite_value(node[FLOAT_MARK])
        return {k: _decode(v, tensors) for k, v in node.items()}
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    return node


def encode_state(tree: Mapping[str, Any]) -> bytes:
    """The bytes of a checkpoint file for ``tree`` (see the module docstring)."""
    tensors: dict[str, torch.Tensor] = {}
    layouts: dict[str, list[int]] = {}
    skeleton = _encode(tree, tensors, "", layouts)
    doc: dict[str, Any] = {"version": FORMAT_VERSION, "tree": skeleton, **({"strides": layouts} if layouts else {})}
    text = json.dumps(doc, allow_nan=False, separators=(",", ":"))
    return safetensors.torch.save(tensors, metadata={METADATA_KEY: text})


def _header_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` table of a safetensors header (8-byte little-endian length, then JSON)."""
    if len(data) < 8:
        raise ValueError("file shorter than a safetensors header")
    (size,) = struct.unpack("<Q", data[:8])
    if size > min(_MAX_HEADER, len(data) - 8):
        raise ValueError("safetensors header length is out of range")
    header = json.loads(data[8 : 8 + size])
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    if not isinstance(meta, dict):
        raise ValueError("no metadata in the safetensors header")
    return meta


def decode_state(data: bytes, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Inverse of :func:`encode_state`; raises ValueError (or a safetensors error) on malformed bytes."""
    meta = _header_metadata(data)
    if METADATA_KEY not in meta:
        raise ValueError("not a chillfl checkpoint (no 'chillfl' metadata)")
    doc = json.loads(meta[METADATA_KEY])
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION or not isinstance(doc.get("tree"), dict):
        raise ValueError(f"unsupported checkpoint layout (expected version {FORMAT_VERSION})")
    tensors = safetensors.torch.load(data)
    for name, stride in dict(doc.get("strides") or {}).items():  # the layouts written: same values, same strides
        t = tensors.get(name)
        if t is None or not isinstance(stride, list) or not _is_dense(t.shape, stride):
            raise ValueError(f"malformed strides for tensor {name!r}")
        tensors[name] = torch.empty_strided(t.shape, stride, dtype=t.dtype).copy_(t)
    if str(torch.device(device)) != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return _decode(doc["tree"], tensors)


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable; not every platform can open a folder (Windows), which is then skipped."""
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


def write_state(path: Path, tree: Mapping[str, Any]) -> None:
    """Write ``tree`` to ``path`` atomically: a reader sees the previous file or the complete new one."""
    path = Path(path)
    data = encode_state(tree)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _one_line(exc: object) -> str:
    """ConfigError messages are printed as one line by the CLI."""
    return " ".join(str(exc).split()) or type(exc).__name__


def read_state(path: Path, device: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint written by :func:`write_state`; missing or corrupt files raise ConfigError."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError("checkpoint", f"cannot read {path}: {_one_line(exc.strerror or exc)}") from exc
    try:
        return decode_state(data, device)
    # malformed input can fail in json, struct, safetensors or the skeleton walk; all mean "corrupt file"
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, safetensors.SafetensorError) as exc:
        raise ConfigError("checkpoint", f"{path} is not a valid chillfl checkpoint: {_one_line(exc)}") from exc

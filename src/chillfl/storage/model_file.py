"""``model.safetensors``: a run's trained global model as plain named tensors (``fc1.weight``, ...).

Written so that any safetensors reader loads it without chillfl::

    model.load_state_dict(safetensors.torch.load_file("results/run/model.safetensors"), strict=True)

A weight tied under two names (``decoder.weight`` is ``embed.weight``) is stored once, under the name the model
registered first, so that no reader sees two copies that could differ: load such a model with ``strict=False`` (the
tie fills the other name), or through :func:`chillfl.load_run`.

(checkpoints, which hold whole state trees, keep :mod:`chillfl.storage.checkpoint`'s
format). Files from older chillfl versions stored the model as such a tree
(tensors named ``"0"``, ``"1"``, ...); :func:`read_model` reads both.

``client_models.safetensors`` (``checkpoint.client_models``) is the same kind
of file with every client's own model, its tensors named ``"<client id>/<name>"``
(``"3/fc1.weight"``), so any safetensors reader lists them;
:func:`read_client_models` splits them back per client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import safetensors
import safetensors.torch
import torch

from chillfl.storage.checkpoint import METADATA_KEY, _header_metadata, decode_state, write_atomic
from chillfl.errors import ConfigError, one_line


def write_model(path: Path, state: Mapping[str, torch.Tensor]) -> None:
    """``state`` (parameter and buffer name -> tensor) as a plain safetensors file, written atomically."""
    tensors = {name: t.detach().to("cpu", copy=True, memory_format=torch.contiguous_format) for name, t in state.items()}
    write_atomic(Path(path), safetensors.torch.save(tensors, metadata={"format": "pt"}))


def write_client_models(path: Path, clients: Mapping[int, Mapping[str, torch.Tensor]]) -> None:
    """Every client's own model in one plain safetensors file, tensors named ``"<client id>/<name>"``, written atomically."""
    write_model(path, {f"{cid}/{name}": t for cid, state in sorted(clients.items()) for name, t in state.items()})


def read_client_models(path: Path, device: str | torch.device = "cpu", num_clients: int | None = None) -> dict[int, dict[str, torch.Tensor]]:
    """Client id -> its model, from a ``client_models.safetensors`` (this format or the older state-tree one): clients in
    id order, each model's tensors by name (:func:`by_name`). A client id is a number of ASCII digits, written as chillfl
    writes it, below ``num_clients`` where the caller knows the run's ``federation.num_clients``
    (:func:`check_client_ids` checks that after the read); else the file is corrupt."""
    out: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in _read_tensors(Path(path), device, CLIENTS_FIELD, nested=True).items():
        if isinstance(value, Mapping):  # an older file: the tree {"client id": {name: tensor}}
            out[_client_id(path, key, key, num_clients)] = dict(value)
            continue
        cid, sep, name = key.partition("/")
        if not sep:
            raise ConfigError(CLIENTS_FIELD, f"{path}: tensor {key!r} is not named '<client id>/<name>'")
        out.setdefault(_client_id(path, cid, key, num_clients), {})[name] = value
    return {cid: out[cid] for cid in sorted(out)}  # clients in id order ("10/..." sorts before "2/..." as text)


CLIENTS_FIELD = "checkpoint.client_models"
"""The field a corrupt ``client_models.safetensors`` is reported on."""


def check_client_ids(path: Path, clients: Mapping[int, Any], num_clients: int) -> None:
    """ConfigError naming ``path`` unless every client id of ``clients`` (read from it) is one of the run's ``num_clients``."""
    for cid in clients:
        _client_id(path, str(cid), str(cid), num_clients)


def _client_id(path: Path, text: str, key: str, num_clients: int | None) -> int:
    """``text`` as a client id of the run, or ConfigError naming the file. Why: ``str.isdigit`` is True of ``"١"`` (an
    Arabic-Indic one, which ``int`` reads as 1), and ``-1`` or a 23-digit id named a client no run has; a crafted file
    (its checksum recomputed) was read as those clients' models without a word."""
    if not (text.isascii() and text.isdigit()) or text != str(int(text)) or (num_clients is not None and int(text) >= num_clients):
        ids = "a client id" if num_clients is None else f"one of the run's client ids 0..{num_clients - 1}"
        raise ConfigError(CLIENTS_FIELD, f"{path}: tensor {key[:80]!r} does not name {ids}")
    return int(text)


def read_model(path: Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The name -> tensor dict of a ``model.safetensors`` (this format or the older state-tree one), by name (:func:`by_name`)."""
    return _read_tensors(Path(path), device, "model")


def _read_tensors(path: Path, device: str | torch.device, field: str, nested: bool = False) -> dict[str, Any]:
    """A plain safetensors file's name -> tensor dict, or an older file's state tree; unreadable files: ConfigError on ``field``.
    An older tree must hold a tensor under every name (``nested``: a name -> tensor table under every client id), else
    the file is corrupt: a list or a number there went on into ``copy_`` (a TypeError) or was broadcast into a weight."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(field, f"cannot read {path}: {one_line(str(exc.strerror or exc))}") from exc
    try:
        try:
            legacy = METADATA_KEY in _header_metadata(data)
        except ValueError:  # no metadata table at all: a plain file from any writer
            legacy = False
        tensors = dict(decode_state(data)) if legacy else by_name(safetensors.torch.load(data))
        if legacy:
            _check_tree(tensors, nested)
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, safetensors.SafetensorError) as exc:
        raise ConfigError(field, f"{path} is not a valid safetensors model file: {one_line(str(exc))}") from exc
    if str(torch.device(device)) != "cpu":
        tensors = {k: v.to(device) if isinstance(v, torch.Tensor) else {n: t.to(device) for n, t in v.items()} for k, v in tensors.items()}
    return tensors


def _check_tree(tree: Mapping[str, Any], nested: bool) -> None:
    """ValueError unless every entry of an older file's ``tree`` is a tensor (``nested``: a table of them)."""
    for key, value in tree.items():
        if nested and isinstance(value, Mapping):
            _check_tree(value, False)
        elif not isinstance(value, torch.Tensor):
            raise ValueError(f"entry {str(key)[:80]!r} is a {type(value).__name__}, not a tensor")


def by_name(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` sorted by name. Why: safetensors' reader hands a file's tensors back in an order that changes from one
    process to the next, so a model read back (:func:`chillfl.load_run`, a comparison's returned runs) listed its
    parameters, and a client file its clients, in another order each time; the file does not keep the written order
    (it lays tensors out by dtype and name), and a fixed one is what a reader can rely on."""
    return {name: tensors[name] for name in sorted(tensors)}

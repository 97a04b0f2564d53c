"""``model.safetensors``: a run's trained global model as plain named tensors (``fc1.weight``, ...).

Written so that any safetensors reader loads it without chillfl::

    model.load_state_dict(safetensors.torch.load_file("results/run/model.safetensors"), strict=True)

(checkpoints, which hold whole state trees, keep :mod:`chillfl.storage.checkpoint`'s
format). Files from older chillfl versions stored the model as such a tree
(tensors named ``"0"``, ``"1"``, ...); :func:`read_model` reads both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import safetensors
import safetensors.torch
import torch

from chillfl.storage.checkpoint import METADATA_KEY, _header_metadata, decode_state, write_atomic
from chillfl.errors import ConfigError, one_line


def write_model(path: Path, state: Mapping[str, torch.Tensor]) -> None:
    """``state`` (parameter and buffer name -> tensor) as a plain safetensors file, written atomically."""
    tensors = {name: t.detach().to("cpu", copy=True, memory_format=torch.contiguous_format) for name, t in state.items()}
    write_atomic(Path(path), safetensors.torch.save(tensors, metadata={"format": "pt"}))


def read_model(path: Path, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The name -> tensor dict of a ``model.safetensors`` (this format or the older state-tree one)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError("model", f"cannot read {path}: {one_line(str(exc.strerror or exc))}") from exc
    try:
        try:
            legacy = METADATA_KEY in _header_metadata(data)
        except ValueError:  # no metadata table at all: a plain file from any writer
            legacy = False
        tensors = dict(decode_state(data)) if legacy else safetensors.torch.load(data)
    except (ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError, safetensors.SafetensorError) as exc:
        raise ConfigError("model", f"{path} is not a valid safetensors model file: {one_line(str(exc))}") from exc
    if str(torch.device(device)) != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return tensors

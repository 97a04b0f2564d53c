"""A model file read back lists its tensors by name, and a client-models file its clients in id order, every time.

safetensors lays a file's tensors out by dtype and name, and its reader returns them in an order that changes from
one process to the next: ``chillfl.load_run`` and a comparison's returned runs (read back from their folders) listed
parameters and clients in another order each time (rev104a)."""

from __future__ import annotations

from pathlib import Path

import safetensors.torch
import torch

from chillfl.storage.model_file import read_client_models, read_model, write_client_models, write_model

NAMES = [f"layer{i}.{part}" for i in range(12, 0, -1) for part in ("weight", "bias")]
"""Written not sorted: 24 names, the layers counted down (a hash map keeps no such order by chance)."""


def test_a_model_is_read_back_by_name(tmp_path: Path) -> None:
    state = {name: torch.full((2,), float(i)) for i, name in enumerate(NAMES)}
    write_model(tmp_path / "m.safetensors", state)
    back = read_model(tmp_path / "m.safetensors")
    assert list(back) == sorted(NAMES) and all(torch.equal(back[k], state[k]) for k in NAMES)


def test_client_models_are_read_back_clients_in_id_order_names_by_name(tmp_path: Path) -> None:
    clients = {cid: {name: torch.full((1,), float(cid)) for name in NAMES[:6]} for cid in (11, 1, 2, 10, 0, 3)}
    write_client_models(tmp_path / "c.safetensors", clients)
    back = read_client_models(tmp_path / "c.safetensors")
    assert list(back) == [0, 1, 2, 3, 10, 11] and all(list(state) == sorted(NAMES[:6]) for state in back.values())
    assert all(torch.equal(back[cid][name], clients[cid][name]) for cid in clients for name in NAMES[:6])


def test_another_writers_file_is_read_by_name(tmp_path: Path) -> None:
    state = {name: torch.zeros(1) for name in NAMES}
    (tmp_path / "bare.safetensors").write_bytes(safetensors.torch.save(state))  # no metadata table at all
    assert list(read_model(tmp_path / "bare.safetensors")) == sorted(NAMES)

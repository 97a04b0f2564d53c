"""The ``cuda_graphs`` note on a device that is neither the CPU nor CUDA (mut101 N16): only the CPU was checked, so a
rule "note on the CPU only" passed though an MPS (or meta) run records no graph either."""

from __future__ import annotations

import pytest
import torch

from chillfl.config import load_config
from chillfl.experiment import cpu_graphs_note
from chillfl.experiments import resolve_config


@pytest.mark.parametrize("device", ["meta", "mps"])
def test_cuda_graphs_on_another_accelerator_are_noted(device: str) -> None:
    on = load_config(resolve_config("demo"), {"executor": "vectorized", "cuda_graphs": True})
    note = cpu_graphs_note(on, torch.device(device))  # a pure function: no such device needed
    assert note is not None and note.startswith("note: cuda_graphs = true") and f"'{device}'" in note
    assert cpu_graphs_note(on, torch.device("cuda", 0)) is None

"""``cuda_graphs = true`` on a device that is not CUDA records nothing; the run says so in a note (it was silent, and
``config.toml`` recorded ``true``)."""

from __future__ import annotations

import torch

from chillfl.config import load_config
from chillfl.experiment import cpu_graphs_note
from chillfl.experiments import resolve_config


def test_cuda_graphs_off_cuda_is_noted() -> None:
    on = load_config(resolve_config("demo"), {"executor": "vectorized", "cuda_graphs": True})
    off = load_config(resolve_config("demo"), {"executor": "vectorized"})
    note = cpu_graphs_note(on, torch.device("cpu"))
    assert note is not None and note.startswith("note: cuda_graphs = true") and "'cpu'" in note
    assert cpu_graphs_note(off, torch.device("cpu")) is None
    assert cpu_graphs_note(on, torch.device("cuda")) is None

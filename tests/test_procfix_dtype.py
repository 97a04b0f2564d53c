"""A registered model is float32, as the datasets are, under any default dtype the caller set (a notebook's
torch.set_default_dtype(torch.float64) made float64 weights, and round 1 a Float-vs-Double matmul error and a .partial)."""

from __future__ import annotations

from typing import Iterator

import pytest
import torch

import chillfl
from chillfl.models.registry import build_model

DIGITS = {"federation": {"num_clients": 4, "rounds": 1}, "model": {"name": "mlp"}, "dataset": {"name": "digits"}}


@pytest.fixture
def float64_default() -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_a_registered_model_is_float32_under_a_float64_default(float64_default: object) -> None:
    model = build_model("mlp", (8,), 3, seed=0)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert torch.get_default_dtype() == torch.float64  # the caller's, given back


def test_a_run_on_a_registered_model_completes_under_a_float64_default(float64_default: object) -> None:
    result = chillfl.run(config=DIGITS, write=False, progress=False)
    assert len(result.records) == 1 and torch.get_default_dtype() == torch.float64


def test_fedgen_on_a_registered_model_completes_under_a_float64_default(float64_default: object) -> None:
    """FedGen builds its generator and draws its noise outside build_model: the run is float32 throughout (it was a
    Double-vs-Float matmul error in round 1)."""
    config = {**DIGITS, "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 2}, "algorithm": {"name": "fedgen"},
              "client": {"epochs": 1, "batch_size": 32}}
    result = chillfl.run(config=config, write=False, progress=False)
    assert len(result.records) == 2 and torch.get_default_dtype() == torch.float64

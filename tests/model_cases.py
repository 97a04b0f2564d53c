"""Every registered model at its natural input, trained one step one client at a time and vmapped: the CUDA suite and the
deterministic-algorithms check share them. Generated from the model registry, so a new model is covered."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from chillfl.executors.sequential import ClientJob
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.models import build_model, model_names
from chillfl.training.local import LocalSpec, model_state, train_client

CIFAR, MNIST = (3, 32, 32), (1, 28, 28)
INPUTS: dict[str, list[tuple[int, ...]]] = {"femnist_dnn": [MNIST], "har_cnn1d": [(9, 128)], "fedchill_cnn1": [CIFAR, MNIST], "char_lstm": [(80,)]}
"""Each model's input shapes (default: CIFAR-shaped); MNIST for FedChill's CNN1 too, where its 7 x 7 -> 2 x 2 pooling bins overlap."""
LIGHT: dict[str, dict[str, Any]] = {"alexnet": {"hidden": 32}}


def model_cases() -> list[Any]:
    return [pytest.param(name, shape, id=f"{name}-{'x'.join(map(str, shape))}") for name in model_names() for shape in INPUTS.get(name, [CIFAR])]


def train_both_ways(name: str, shape: tuple[int, ...], device: torch.device) -> None:
    """One client's two steps (``train_client``), then two clients vmapped (the accelerator policy: resident chunks), on
    ``device``. A model with dropout is not vmapped (the executor trains it per client), so it takes the first way only."""
    torch.manual_seed(0)
    model = build_model(name, shape, 10, LIGHT.get(name, {}), seed=0).to(device)
    g = torch.Generator().manual_seed(1)
    jobs = [ClientJob(c, model_state(model), torch.randn(4, *shape, generator=g).to(device), torch.randint(0, 10, (4,), generator=g).to(device),
                      0.01, 1.0, {}, c) for c in range(2)]
    spec = LocalSpec(epochs=1, batch_size=2)
    out = train_client(model, jobs[0].start, jobs[0].x, jobs[0].y, spec=spec, lr=0.01, temperature=1.0, context={}, generator=torch.Generator().manual_seed(2))
    assert out.num_steps == 2 and all(torch.isfinite(v).all() for v in out.params.values())
    if not any(isinstance(m, nn.Dropout) and m.p > 0 for m in model.modules()):
        vectorized = VectorizedExecutor(model, spec, accelerator=True)
        assert len(vectorized.run(jobs)) == 2 and vectorized.fallback_reason is None

"""A worker (Ray actor, pool process) sets the run's ``deterministic`` when it trains on CUDA, for every run it serves."""

from __future__ import annotations

import os
from typing import Iterator

import pytest
import torch
from torch import nn

from chillfl.training import local
from chillfl.training.local import LocalSpec


@pytest.fixture
def flags() -> Iterator[None]:
    mode, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    env, bench = os.environ.get("CUBLAS_WORKSPACE_CONFIG"), torch.backends.cudnn.benchmark
    restore = local.pin_precision("fp32")  # what pin_worker pins is a worker's for good: this process gets its own back
    yield
    restore()
    torch.use_deterministic_algorithms(mode, warn_only=warn)
    torch.backends.cudnn.benchmark = bench
    if env is None:
        os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
    else:
        os.environ["CUBLAS_WORKSPACE_CONFIG"] = env


def test_a_cuda_worker_sets_each_runs_deterministic(flags: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "on_cuda", lambda model: True)  # flags only: checked without a GPU
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.benchmark = True
    local.pin_worker(nn.Linear(2, 2), LocalSpec(epochs=1, batch_size=4, deterministic=True))
    assert torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.benchmark
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
    local.pin_worker(nn.Linear(2, 2), LocalSpec(epochs=1, batch_size=4, deterministic=False))  # the actor's next run
    assert not torch.are_deterministic_algorithms_enabled()


def test_a_cpu_worker_leaves_deterministic_alone(flags: None) -> None:
    torch.use_deterministic_algorithms(False)
    local.pin_worker(nn.Linear(2, 2), LocalSpec(epochs=1, batch_size=4, deterministic=True))
    assert not torch.are_deterministic_algorithms_enabled()


def test_the_ray_actor_sets_the_runs_settings_for_each_run(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    from chillfl.executors import ray_executor

    seen: list[LocalSpec] = []
    monkeypatch.setattr(ray_executor, "pin_worker", lambda model, spec: seen.append(spec))
    runs = {b"one": (nn.Linear(2, 2), LocalSpec(epochs=1, batch_size=4, deterministic=True), None),
            b"two": (nn.Linear(2, 2), LocalSpec(epochs=1, batch_size=4, deterministic=False), None)}

    class Ref:
        def __init__(self, key: bytes) -> None:
            self.key = key

        def binary(self) -> bytes:
            return self.key

    monkeypatch.setattr(ray, "get", lambda ref: runs[ref.key])
    worker = ray_executor.Worker(0)
    worker._ready((Ref(b"one"),))
    worker._ready((Ref(b"one"),))  # the same run: set once
    worker._ready((Ref(b"two"),))
    assert [s.deterministic for s in seen] == [True, False]


def test_the_runs_spec_carries_its_deterministic() -> None:
    import chillfl
    from chillfl.api import _prepare
    from chillfl.experiment import build_experiment

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 4, generator=g), torch.randint(0, 2, (40,), generator=g)
    data = chillfl.TensorData(x[:32], y[:32], x[32:], y[32:], num_classes=2)
    for flag in (True, False):
        model = nn.Linear(4, 2)
        config, dataset = _prepare(model, data, {"federation": {"num_clients": 2, "rounds": 1}, "deterministic": flag}, None, {})
        assert build_experiment(config, dataset, model=model).spec.deterministic is flag

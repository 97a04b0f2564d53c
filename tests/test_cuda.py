"""The CUDA suite: runs where torch sees a GPU, and is reported as skipped (not run) everywhere else.

On a GPU machine: ``python -m pytest tests/test_cuda.py -rs``.
"""

from __future__ import annotations

import pytest
import torch

from chillfl.config import load_config
from chillfl.runner import run_experiment

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine: the CUDA suite was NOT run")

BASE = {
    "dataset.name": "digits",
    "model.name": "flexchill_cnn",
    "federation.num_clients": 6,
    "federation.clients_per_round": 4,
    "federation.rounds": 3,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.client_split_size": 20,
}
SCARLET = {
    "distillation.method": "scarlet",
    "distillation.public_size": 120,
    "distillation.subset_size": 40,
    "distillation.cache_duration": 2,
}


def _run(**over: object) -> list[dict]:
    return run_experiment(load_config(None, {**BASE, **over}), write=False, progress=False).records


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
@pytest.mark.parametrize("extra", [{}, SCARLET, {"algorithm.name": "scaffold", "temperature.policy": "fedchill"}], ids=["fedavg", "scarlet", "scaffold-fedchill"])
def test_cuda_runs_are_bitwise_reproducible(executor: str, extra: dict) -> None:
    first = _run(device="cuda", executor=executor, **extra)
    assert first == _run(device="cuda", executor=executor, **extra)


@pytest.mark.parametrize("extra", [{}, SCARLET], ids=["fedavg", "scarlet"])
def test_cuda_agrees_with_cpu(extra: dict) -> None:
    cpu, gpu = _run(device="cpu", **extra), _run(device="cuda", **extra)
    assert [r["clients"] for r in cpu] == [r["clients"] for r in gpu]
    assert gpu[-1]["global_acc"] == pytest.approx(cpu[-1]["global_acc"], abs=0.03)
    assert gpu[-1]["train_loss"] == pytest.approx(cpu[-1]["train_loss"], rel=0.02)


def test_cuda_run_keeps_the_model_on_the_gpu() -> None:
    out = run_experiment(load_config(None, {**BASE, "device": "cuda"}), write=False, progress=False)
    assert out.model_state is not None and all(v.is_cuda for v in out.model_state.values())
    assert out.summary["device"].startswith("cuda")


def test_processes_executor_is_refused_on_cuda() -> None:
    from chillfl.errors import ConfigError

    with pytest.raises(ConfigError, match="executor"):
        _run(device="cuda", executor="processes")

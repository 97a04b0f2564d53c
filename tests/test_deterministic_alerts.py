"""``deterministic = true`` on CUDA, checked without a GPU (``deterministic_alerts.DeterministicAlerts``).

Every registered method runs two rounds under it (tests/test_every_method_gpu_rules.py,
in the same runs as the stand-in device's check), and every registered model trains a
step (one client, and vmapped clients on the accelerator policy: the GPU's
path), with the mode on: no op may be one that CUDA refuses under
``torch.use_deterministic_algorithms(True)``. The first tests check the checker
and ``models/pooling.py``, the fix for the op it found: ``AdaptiveAvgPool2d(2)``
in FedChill's CNN1/CNN3 and the SVHN CNN. (FedAlign pools a detached stage input,
so no backward of it runs.)
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import chillfl.models.fedchill as fedchill_models
from chillfl.config import load_config
from chillfl.engine.predict import FallbackRefused
from chillfl.models import build_model
from chillfl.models.pooling import AveragePool2d, average_pool_to, averaging_matrix
from chillfl.runner import run_experiment
from deterministic_alerts import DeterministicAlerts, NondeterministicOnCuda
from model_cases import model_cases, train_both_ways
from registry_cases import registry_cases

# ---------------------------------------------------------------- the checker


def _backward(f: Any, x: torch.Tensor) -> None:
    x = x.detach().requires_grad_(True)
    f(x).sum().backward()


def test_ops_without_a_deterministic_cuda_kernel_are_caught() -> None:
    x = torch.randn(2, 3, 8, 8)
    with DeterministicAlerts():
        F.adaptive_avg_pool2d(x, 2)  # the forward is deterministic
        _backward(lambda t: F.adaptive_avg_pool2d(t, 1), x)  # 1 x 1 is a mean
        torch.arange(5).cumsum(0)  # integer cumsum: allowed
        torch.bincount(torch.tensor([0, 1, 1]))
        F.nll_loss(torch.randn(4, 3).log_softmax(1), torch.tensor([0, 1, 2, 0]))  # 2-d input: nll_loss, not nll_loss2d
        torch.randn(5).median()  # no indices
        for bad, match in (
            (lambda: _backward(lambda t: F.adaptive_avg_pool2d(t, 2), x), "_adaptive_avg_pool2d_backward"),
            (lambda: torch.randn(5).cumsum(0), "cumsum"),
            (lambda: torch.bincount(torch.tensor([0, 1]), weights=torch.ones(2)), "bincount"),
            (lambda: F.nll_loss(torch.randn(2, 3, 4, 4).log_softmax(1), torch.zeros(2, 4, 4, dtype=torch.long)), "nll_loss2d"),
            (lambda: torch.randn(5).median(0), "median"),
            (lambda: _backward(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), x), "upsample_bilinear2d_backward"),
        ):
            with pytest.raises(NondeterministicOnCuda, match=match):
                bad()


# ---------------------------------------------------------------- models/pooling.py


def test_average_pool_to_by_hand() -> None:
    x = torch.arange(16.0).view(1, 1, 4, 4)
    assert average_pool_to(x, (2, 2)).flatten().tolist() == [2.5, 4.5, 10.5, 12.5]  # 2 x 2 blocks: (0+1+4+5)/4, ...
    # 3 -> 2 overlapping bins, as adaptive pooling: rows [0, 2) and [1, 3)
    assert averaging_matrix(3, 2, x).tolist() == [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]]
    row = torch.tensor([[[[0.0, 1.0, 2.0]]]])
    assert average_pool_to(row, (1, 2)).flatten().tolist() == [0.5, 1.5]
    # 5 -> 3: bins [0, 2), [1, 4), [3, 5)
    assert averaging_matrix(5, 3, x).flatten().tolist() == pytest.approx([0.5, 0.5, 0, 0, 0, 0, 1 / 3, 1 / 3, 1 / 3, 0, 0, 0, 0, 0.5, 0.5])


@pytest.mark.parametrize("shape,size", [((8, 8), (2, 2)), ((8, 8), (4, 4)), ((7, 7), (2, 2)), ((5, 7), (3, 2)), ((6, 6), (6, 6)), ((6, 4), (1, 1))])
def test_average_pool_to_equals_adaptive_pooling_with_no_cuda_alert(shape: tuple[int, int], size: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, *shape, generator=g)
    w = torch.randn(2, 3, *size, generator=g)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    (F.adaptive_avg_pool2d(a, size) * w).sum().backward()
    with DeterministicAlerts():
        out = average_pool_to(b, size)
        (out * w).sum().backward()
    torch.testing.assert_close(out, F.adaptive_avg_pool2d(x, size), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(b.grad, a.grad, rtol=1e-6, atol=1e-6)
    vmapped = torch.func.vmap(lambda t: average_pool_to(t, size))(x)  # per sample, as the vectorised executor calls it
    torch.testing.assert_close(vmapped, out, rtol=1e-6, atol=1e-6)


def test_the_pool_module_keeps_state_dicts_unchanged() -> None:
    pool = AveragePool2d(2)
    assert dict(pool.state_dict()) == {} and "output_size=2" in repr(pool)
    model = build_model("fedchill_cnn1", (3, 32, 32), 10, {}, seed=0)
    assert not any(isinstance(m, nn.AdaptiveAvgPool2d) for m in model.modules())


# ---------------------------------------------------------------- every registered method


def _run(over: dict[str, Any], executor: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    from chillfl.executors import vectorized

    monkeypatch.setattr(vectorized.VectorizedExecutor, "resident", lambda self, device: True)  # the GPU's path (one thread: the mode sees it)
    cfg = load_config(None, {**over, "executor": executor, "device": "cpu", "deterministic": True})
    with DeterministicAlerts():
        return run_experiment(cfg, write=False, progress=False).records


# test_every_method_gpu_rules.py runs every registered method under this mode and the stand-in device's at once


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_the_run_check_fails_on_the_pooling_as_it_was(executor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nn.AdaptiveAvgPool2d back in FedChill's CNN1 (on digits' 2 x 2 maps), the run check fails: CUDA's backward
    kernel refuses whatever the sizes. (Dropout off: a step with dropout is not vmapped.)"""
    monkeypatch.setattr(fedchill_models, "AveragePool2d", nn.AdaptiveAvgPool2d)
    over = {**dict(registry_cases())["algorithm-fedavg"], "model.name": "fedchill_cnn1", "model.dropout": False}
    refused = (NondeterministicOnCuda, FallbackRefused)  # vectorized: the probe's step raises, and a strict run refuses to fall back
    with pytest.raises(refused, match="_adaptive_avg_pool2d_backward: no deterministic CUDA kernel"):
        _run(over, executor, monkeypatch)


# ---------------------------------------------------------------- every registered model


@pytest.mark.slow  # every registered model, ResNets and a ViT included
@pytest.mark.parametrize("name,shape", model_cases())
def test_every_model_trains_under_cuda_deterministic_algorithms(name: str, shape: tuple[int, ...]) -> None:
    with DeterministicAlerts():
        train_both_ways(name, shape, torch.device("cpu"))

"""Every registered method, two rounds, under both of the GPU's rules checked without a GPU.

One run a method and executor (sequential; vectorised on the accelerator policy, resident and vmapped: the GPU's
path) with both checkers on at once, instead of one run for each:

* :class:`device_mixing.StandInDevice` (a torch *function* mode): the run's device is the stand-in ``cpu:0``, and an
  op that meets a host-made tensor with one of the run's raises :class:`~device_mixing.DeviceMixing`, as CUDA would
  (issue 26; tests/test_device_mixing.py checks the checker);
* :class:`deterministic_alerts.DeterministicAlerts` (a torch *dispatch* mode, below autograd and vmap): an op CUDA
  refuses under ``torch.use_deterministic_algorithms(True)`` raises
  :class:`~deterministic_alerts.NondeterministicOnCuda` (tests/test_deterministic_alerts.py checks that one).

The two see different layers (Python-level torch calls; aten ops, backward ones included), so neither hides what the
other would catch, and each raises its own error.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch
from torch import nn

import chillfl.experiment as experiment
import chillfl.models.fedchill as fedchill_models
import chillfl.models.mlp as mlp_models
from chillfl.config import load_config
from chillfl.runner import run_experiment
from deterministic_alerts import DeterministicAlerts, NondeterministicOnCuda
from device_mixing import STAND_IN, DeviceMixing, stand_in_device
from registry_cases import TINY, registry_cases


def run_under_both(over: dict[str, Any], executor: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Two rounds of ``over`` on the stand-in device with the deterministic-alerts mode on; the run's records."""
    from chillfl.executors import vectorized

    monkeypatch.setattr(vectorized.VectorizedExecutor, "resident", lambda self, device: True)  # the GPU's path
    cfg = load_config(None, {**over, "executor": executor, "device": "cpu", "deterministic": True})
    with mock.patch.object(experiment, "resolve_device", lambda name: STAND_IN), stand_in_device(), DeterministicAlerts():
        return run_experiment(cfg, write=False, progress=False).records


@pytest.mark.slow  # every method x 2 executors: minutes; `pytest -m "not slow"` leaves it out
@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
@pytest.mark.parametrize("over", [pytest.param(over, id=case) for case, over in registry_cases()])
def test_every_method_keeps_its_tensors_on_the_run_device_and_its_ops_deterministic_on_cuda(
        over: dict[str, Any], executor: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(run_under_both(over, executor, monkeypatch)) == 2


def test_a_host_tensor_in_the_forward_still_fails_with_both_modes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dispatch mode inside does not hide device mixing: an MLP whose forward adds a host-made bias fails."""
    forward = mlp_models.MLP.forward
    monkeypatch.setattr(mlp_models.MLP, "forward", lambda self, x: forward(self, x) + torch.zeros(forward(self, x).shape[-1]))
    with pytest.raises(DeviceMixing):
        run_under_both(TINY, "sequential", monkeypatch)


def test_an_op_without_a_deterministic_cuda_kernel_still_fails_with_both_modes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The function mode outside does not hide an alert: FedChill's CNN1 with nn.AdaptiveAvgPool2d back (its backward
    has no deterministic CUDA kernel) fails. (Dropout off, as in test_deterministic_alerts.)"""
    monkeypatch.setattr(fedchill_models, "AveragePool2d", nn.AdaptiveAvgPool2d)
    over = {**TINY, "model.name": "fedchill_cnn1", "model.dropout": False}
    with pytest.raises(NondeterministicOnCuda, match="_adaptive_avg_pool2d_backward"):
        run_under_both(over, "sequential", monkeypatch)

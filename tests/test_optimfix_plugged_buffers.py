"""A server optimiser passed from Python (``chillfl.run(aggregator=FedOpt("adam"))``) treats the model's buffers as the
same method named in the config does: it learns the run's parameter names, so batch-norm statistics take the weighted
average instead of server momentum or Adam (which drove a running variance negative: NaN accuracy)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.base import ClientResult, with_run_model
from chillfl.aggregation.fedavgm import FedAvgM
from chillfl.aggregation.fednova import FedNova
from chillfl.aggregation.fedopt import FedAdamOptions, FedOpt, FedOptOptions

CONFIG: dict[str, Any] = {"federation": {"num_clients": 2, "rounds": 2}, "client": {"lr": 0.1, "batch_size": 16},
                          "temperature": {"policy": "none"}}


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 6, generator=g) * 3 + 1  # off-centre inputs: the running statistics move far from (0, 1)
    y = (x[:, 0] > 1).long()
    return chillfl.TensorData(x[:64], y[:64], x[64:], y[64:], num_classes=2)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))


def _run(algorithm: dict[str, Any], aggregator: Any = None) -> chillfl.Result:
    config = CONFIG if aggregator is not None else {**CONFIG, "algorithm": algorithm}
    return chillfl.run(model=_model(), data=_data(), config=config, write=False, progress=False, aggregator=aggregator)


@pytest.mark.parametrize(("algorithm", "aggregator"), [
    ({"name": "fedavgm", "beta": 0.9, "server_lr": 1.0}, FedAvgM()),
    ({"name": "fedadam", "server_lr": 0.1}, FedOpt("adam", FedAdamOptions(server_lr=0.1))),
    ({"name": "fedyogi", "server_lr": 0.1}, FedOpt("yogi", FedOptOptions(server_lr=0.1))),
])
def test_an_instance_from_python_runs_bitwise_as_the_config_names_it(algorithm: dict[str, Any], aggregator: Any) -> None:
    named, plugged = _run(algorithm), _run(algorithm, aggregator)
    for key, value in named.state.items():
        assert torch.equal(plugged.state[key], value), key  # the running statistics too
    assert [r["global_acc"] for r in plugged.records] == [r["global_acc"] for r in named.records]
    assert aggregator.param_keys is None  # the run worked on a copy: the caller's instance learnt nothing


def test_names_given_at_construction_are_kept() -> None:
    agg = with_run_model(FedAvgM(param_keys=["0.weight"]), _model())
    assert agg.param_keys == ["0.weight"]


def test_frozen_weights_follow_each_rules_builder() -> None:
    model = _model()
    model[0].bias.requires_grad_(False)
    assert "0.bias" not in with_run_model(FedOpt("adam"), model).param_keys  # trainable only, as fedadam's builder
    assert "0.bias" in with_run_model(FedNova(), model).param_keys  # every parameter, as fednova's builder
    assert "1.running_var" not in with_run_model(FedNova(), model).param_keys


def test_an_instance_never_told_its_parameters_says_so(caplog: pytest.LogCaptureFixture) -> None:
    state = {"w": torch.ones(2), "running_var": torch.ones(2)}
    results = [ClientResult(0, {"w": torch.zeros(2), "running_var": torch.full((2,), 3.0)}, 1, 1, 0.1, 1.0, 0.0)]
    with caplog.at_level(logging.WARNING, "chillfl"):
        FedOpt("adam").aggregate(state, results, 0)
    assert sum("FedOpt was built without param_keys" in r.getMessage() for r in caplog.records) == 1


def test_fedmut_learns_every_parameter_as_its_builder() -> None:
    from chillfl.aggregation.fedmut import FedMut

    model = _model()
    model[0].bias.requires_grad_(False)
    keys = with_run_model(FedMut(seed=0), model).param_keys
    assert keys is not None and "0.bias" in keys and "1.running_var" not in keys  # its mutation leaves the statistics alone


def test_pa3fed_built_in_python_tells_its_base_the_run_model() -> None:
    from chillfl.aggregation.pa3fed import PA3Fed

    base = FedOpt("adam", FedAdamOptions(server_lr=0.1))
    wrapped = with_run_model(PA3Fed(base), _model())
    assert wrapped.base.param_keys is not None and "1.running_var" not in wrapped.base.param_keys

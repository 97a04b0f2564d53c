"""A misspelt ``weighting`` on an aggregator built in Python is refused as the config path refuses it (it ran as ``samples``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.base import ClientResult, FedAvg, client_weights
from chillfl.aggregation.fedopt import FedAdamOptions, FedOpt, FedOptOptions
from chillfl.errors import ConfigError


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(40, 4, generator=g), torch.arange(40) % 2
    return chillfl.TensorData(x[:32], y[:32], x[32:], y[32:], num_classes=2)


def _run(config: dict | None = None, aggregator: object = None) -> None:
    base = {"federation": {"num_clients": 2, "rounds": 1}}
    chillfl.run(nn.Linear(4, 2), _data(), {**base, **(config or {})}, write=False, progress=False, aggregator=aggregator)


def _refused(config: dict | None = None, aggregator: object = None) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        _run(config, aggregator)
    return err.value


@pytest.mark.parametrize(
    "aggregator",
    [FedAvg("unifrom"), FedOpt("adam", FedOptOptions(weighting="unifrom")), FedOpt("adam", FedAdamOptions(weighting="unifrom"))],  # type: ignore[arg-type]
    ids=["fedavg", "fedopt", "fedadam"],
)
def test_python_typo_is_refused_on_the_field_as_the_config_typo(aggregator):
    from_python = _refused(aggregator=aggregator)
    from_config = _refused({"algorithm": {"name": "fedavg", "weighting": "unifrom"}})
    assert from_python.field == "aggregator.options.weighting"
    assert from_config.field == "algorithm.weighting"
    assert from_python.message == from_config.message  # one rule: the same words on both paths
    assert "did you mean 'uniform'" in from_python.message and "\n" not in str(from_python)


def test_non_string_weighting_is_refused():
    err = _refused(aggregator=FedAvg(3))  # type: ignore[arg-type]
    assert err.field == "aggregator.options.weighting" and "samples, uniform" in err.message


def test_client_weights_refuses_what_it_does_not_know():
    # 1:3 samples: "samples" is [0.25, 0.75], "uniform" [0.5, 0.5]; "bogus" was silently [0.25, 0.75]
    results = [ClientResult(i, {"w": torch.tensor([float(v)])}, n, 1, 0.1, 1.0, 0.0) for i, (v, n) in enumerate([(1, 1), (4, 3)])]
    assert client_weights(results, "uniform").tolist() == [0.5, 0.5]
    assert client_weights(results, "samples").tolist() == [0.25, 0.75]
    with pytest.raises(ValueError, match="unknown value 'bogus'"):
        client_weights(results, "bogus")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown value 'bogus'"):
        FedAvg("bogus").aggregate({"w": torch.tensor([0.0])}, results, 1)  # type: ignore[arg-type]

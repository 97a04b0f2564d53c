"""An instance passed from Python meets what its spec needs of the model (:attr:`AlgorithmSpec.check_model`: a
classifier head, batch norm) as the config's method does, and a wrapper no spec builds declares what its base
declares (a personal model), as a plugin wrapper named in a config does."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError
from chillfl.extend import AroundAggregator, Capabilities, FedAvg
from test_pyagg_bind import X, Y, same, state


class Headless(nn.Module):
    """A model without an ``nn.Linear`` (nothing to call its classifier head) and without batch norm."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(4, 2, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


def refused(aggregator: Any, algorithm: dict[str, Any] | None = None) -> ConfigError:
    config = {"algorithm": algorithm or {"name": "fedavg"}, "federation": {"num_clients": 3, "rounds": 2},
              "client": {"lr": 0.1, "batch_size": 4, "epochs": 1}, "eval": {"clients": "none", "client_split": "none"}}
    with pytest.raises(ConfigError) as info:
        chillfl.run(model=Headless(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config, write=False, progress=False,
                    **({} if aggregator is None else {"aggregator": aggregator}))
    return info.value


def _moon() -> Any:
    from chillfl.aggregation.moon import Moon

    return Moon()


def _fedphp() -> Any:
    from chillfl.aggregation.fedphp import FedPHP

    return FedPHP(2)  # the run's H: 3 clients, all a round, 2 rounds


def _knnper() -> Any:
    from chillfl.aggregation.knnper import KNNPer

    net = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2)).double()  # its own model has a head; the run's has none
    return KNNPer(net, "1")


def _fedbn() -> Any:
    from chillfl.aggregation.fedbn import FedBN

    return FedBN([])


CASES: list[tuple[str, Callable[[], Any], str]] = [("moon", _moon, "MOON"), ("fedphp", _fedphp, "FedPHP"), ("knnper", _knnper, "kNN-Per"),
                                                   ("fedbn", _fedbn, "batch-norm")]


@pytest.mark.parametrize(("name", "make", "said"), CASES, ids=[c[0] for c in CASES])
def test_instance_meets_the_specs_model_needs(name: str, make: Callable[[], Any], said: str) -> None:
    """Finding 7: a raw NoHeadError traceback (MOON), or FedBN([]) on a model without batch norm running as FedAvg."""
    python = refused(make())
    configured = refused(None, {"name": name})
    assert python.field == configured.field == "model" and said in python.message and python.message == configured.message  # a caller's module: no model.name


class Identity(AroundAggregator):
    """A user's wrapper that changes nothing, declaring nothing."""


class Personal(AroundAggregator):
    capabilities = Capabilities(personal_model=True)


def test_wrapper_without_a_spec_declares_its_bases_personal_model() -> None:
    """Finding 5: ``Identity(Ditto())`` was refused (it declared no personal model, its base's half keeps one), and
    ``Personal(FedAvg())`` is still refused (it declares one its base's half does not keep)."""
    from chillfl.aggregation.ditto import Ditto

    assert same(state({"name": "fedavg"}, aggregator=Identity(Ditto())), state({"name": "fedavg"}, aggregator=Ditto()))
    with pytest.raises(ConfigError, match="declares personal_model = True"):
        state({"name": "fedavg"}, aggregator=Personal(FedAvg()))


@pytest.mark.parametrize("name", ["fedbn", "moon"])
def test_a_callers_module_is_refused_on_model_not_model_name(name: str) -> None:
    """A method's need of a caller's own module (FedBN's batch norm, MOON's head) was refused on ``model.name``, a key the
    caller never set (and FedBN's advice named a registered model's option alone)."""

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = torch.nn.Conv1d(1, 3, 6)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.body(x.unsqueeze(1)).flatten(1)

    data = chillfl.TensorData(torch.randn(40, 6), torch.arange(40) % 3, torch.randn(12, 6), torch.arange(12) % 3, num_classes=3)
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=Plain(), data=data, config={"algorithm": {"name": name}, "federation": {"num_clients": 2, "rounds": 1}}, write=False, progress=False)
    assert err.value.field == "model", err.value

"""A subclass that declares no capabilities keeps the limits its parent declares to guard correctness (``plain_sgd``,
``linear_head``): ``class MyScaffold(Scaffold): pass`` ran with Adam without a word while ``Scaffold(2)`` was refused
(report-apiref F6). A subclass that declares its own capabilities replaces them, as before."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.registry import declared_capabilities
from chillfl.errors import ConfigError
from chillfl.aggregation.scaffold import Scaffold
from chillfl.extend import Capabilities, FedAvg

CONFIG: dict[str, Any] = {"federation": {"num_clients": 2, "rounds": 1}, "client": {"optimizer": "adam"}}


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 8, generator=g), torch.randint(0, 3, (60,), generator=g)
    return chillfl.TensorData(x[:48], y[:48], x[48:], y[48:], num_classes=3)


class MyScaffold(Scaffold):
    """Only adds a metric: SCAFFOLD's maths, and so its plain-SGD assumption."""


class LiftedScaffold(Scaffold):
    capabilities = Capabilities()  # its own declaration: the parent's limits are the author's to keep or drop


class Guarded(FedAvg):
    capabilities = Capabilities(plain_sgd="Guarded's step count", takes_weights=True)


class GuardedChild(Guarded):
    pass


def test_a_subclass_keeps_its_parents_limits_only() -> None:
    assert declared_capabilities(GuardedChild, "GuardedChild", "aggregator") == Capabilities(plain_sgd="Guarded's step count")  # not takes_weights
    assert declared_capabilities(LiftedScaffold, "LiftedScaffold", "aggregator") == Capabilities()
    assert declared_capabilities(MyScaffold, "MyScaffold", "aggregator").plain_sgd == "SCAFFOLD's option II control variate (x - y_i) / (K lr)"


@pytest.mark.parametrize("aggregator", [MyScaffold(2), GuardedChild()], ids=["built-in-parent", "plugin-parent"])
def test_an_undeclared_subclass_is_refused_as_its_parent_is(aggregator: Any) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, aggregator=aggregator, write=False, progress=False)
    assert err.value.field == "client.optimizer" and f"{type(aggregator).__name__} needs optimizer = 'sgd'" in err.value.message


def test_a_class_named_by_path_keeps_them_too() -> None:
    config = {**CONFIG, "algorithm": {"name": f"{__name__}:GuardedChild"}}
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config=config, write=False, progress=False)
    assert err.value.field == "client.optimizer" and "Guarded's step count assumes SGD steps" in err.value.message


def test_a_subclass_that_declares_its_own_runs() -> None:
    chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, aggregator=LiftedScaffold(2), write=False, progress=False)

"""``run_capabilities`` (what the privacy mechanisms, the tolerant-rule test and listings ask of an instance passed from
Python) reports the limits the run's refusals enforce: a subclass that declares no ``capabilities`` keeps its parent's
``plain_sgd`` and ``linear_head`` (:func:`~chillfl.aggregation.registry.inherited_limits`). It read the class's own
attribute alone, so ``class MyNova(FedNova): pass`` was refused Adam for FedNova's plain SGD while this said it had
no limit."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.fednova import FedNova
from chillfl.aggregation.registry import run_capabilities
from chillfl.errors import ConfigError
from chillfl.extend import AggregatorBase, Capabilities

CUSTOM = {"name": "custom"}


class MyNova(FedNova):
    """Adds nothing: runs FedNova's normalised update, so keeps its assumption of plain SGD."""


class Headed(AggregatorBase):
    capabilities = Capabilities(linear_head="its own head maths", takes_weights=True)


class HeadedChild(Headed):
    """Declares nothing: keeps its parent's limit (linear_head), not its promises (takes_weights)."""


class Lifted(FedNova):
    capabilities = Capabilities()  # its own maths: lifts FedNova's limit


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 8, generator=g), torch.randint(0, 3, (60,), generator=g)
    return chillfl.TensorData(x[:48], y[:48], x[48:], y[48:], num_classes=3)


def test_a_subclass_that_declares_nothing_reports_its_parents_limits() -> None:
    nova = run_capabilities(CUSTOM, MyNova())
    assert nova == Capabilities(plain_sgd="FedNova's normalised update (x - y_i) / (a_i lr)")
    assert run_capabilities(CUSTOM, HeadedChild()) == Capabilities(linear_head="its own head maths")
    assert run_capabilities(CUSTOM, Headed()) == Headed.capabilities  # its own, whole
    assert run_capabilities(CUSTOM, Lifted()) == Capabilities()  # a subclass's own declaration replaces the parent's


@pytest.mark.parametrize("aggregator", [MyNova(), FedNova()], ids=["subclass", "built-in"])
def test_what_it_reports_is_what_the_run_refuses(aggregator: Any) -> None:
    assert run_capabilities(CUSTOM, aggregator).plain_sgd is not None
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config={"federation": {"num_clients": 2, "rounds": 1},
                                                                  "client": {"optimizer": "adam"}},
                    aggregator=aggregator, write=False, progress=False)
    assert err.value.field == "client.optimizer" and "FedNova's normalised update" in err.value.message

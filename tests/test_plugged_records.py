"""A method passed from Python as an instance records every option it runs with in the saved config (``[algorithm.options]``).

The record kept an instance's ``options`` only when every value was a number, flag or name: one unset (None) value,
a tuple of them or a nested table dropped the whole table, and built-in aggregators that kept their options as
attributes recorded none, so ``chillfl.run(aggregator=FedProx(FedProxOptions(mu=0.1)))`` saved ``mu`` nowhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.aggregation.registry import algorithm_options, make_aggregator, registered_algorithms
from chillfl.errors import ConfigError
from chillfl.experiment import options_record
from chillfl.extend import FedAvg
from chillfl.models import build_model
from chillfl.resolve import option_table
from chillfl.temperature.registry import make_policy, policy_options, registered_policies

REQUIRED = {"norm_bound": {"max_norm": 1.0}}
"""Options without a default, given to build the method at all."""
MODELS = {"fedalign": ("resnet20", (3, 32, 32))}
"""Methods that need a particular model; the others build on a small CNN with batch norm (FedBN needs one)."""


def _set(table: Any) -> Any:
    """A table as TOML can hold it: unset (None) options left out, as the resolved config leaves them out."""
    if isinstance(table, dict):
        return {k: _set(v) for k, v in table.items() if v is not None}
    if isinstance(table, (list, tuple)):
        return [_set(v) for v in table]
    return table


PLAIN_FEDAVG = {"fedavg", "fedalign"}
"""Methods whose aggregator is :class:`FedAvg` itself (FedAlign's options are its term's): its ``weighting`` is not recorded
(FedAvg is every user rule's base class, and an ``options`` set there would overwrite one a subclass sets before
``super().__init__()``); a test below keeps this set to exactly those."""


def _built(name: str) -> Any:
    model_name, shape = MODELS.get(name, ("flexchill_cnn", (3, 8, 8)))
    model = build_model(model_name, shape, 10, {"batch_norm": True} if model_name == "flexchill_cnn" else {}, seed=0)
    aggregator, _ = make_aggregator(name, REQUIRED.get(name, {}), num_clients=4, model=model, seed=0, client_momentum=0.0, rounds=2, clients_per_round=2)
    return aggregator


@pytest.mark.parametrize("name", sorted(set(registered_algorithms()) - PLAIN_FEDAVG))
def test_every_builtin_aggregator_passed_as_an_instance_records_all_of_its_options(name: str) -> None:
    """Every option of its spec, at the value the instance runs with: an unset one filled in at build time (FedNova's
    ``momentum`` from ``client.momentum`` = 0.0) is recorded with that value."""
    aggregator = _built(name)
    spec = registered_algorithms()[name]
    parsed = option_table(algorithm_options(spec, name, REQUIRED.get(name, {})))
    record = options_record(aggregator, "algorithm").get("options", {})
    assert {k: v for k, v in record.items() if parsed.get(k) is not None} == _set(parsed)
    assert all(k in parsed for k in record)


def test_the_methods_whose_fedavg_records_no_options_are_exactly_those_built_as_plain_fedavg() -> None:
    plain = {name for name in registered_algorithms() if type(_built(name)) is FedAvg}
    assert plain == PLAIN_FEDAVG


@pytest.mark.parametrize("name", sorted(registered_policies()))
def test_every_builtin_policy_passed_as_an_instance_records_all_of_its_options(name: str) -> None:
    table = {"policy": name, **({"value": 0.5} if name == "fixed" else {})}
    policy = make_policy(table, np.ones((4, 10)))
    options = policy_options(registered_policies()[name], name, {k: v for k, v in table.items() if k != "policy"})
    expected = _set(option_table(options)) or {"value": 1.0}  # ``none`` is the constant policy at T = 1
    assert options_record(policy, "temperature") == {"options": expected}


@dataclass(frozen=True)
class Inner:
    steps: int = 3


@dataclass(frozen=True)
class Nested:
    scale: float = 0.5
    start: float | None = None
    pair: tuple[int, int] = (1, 2)
    inner: Inner = Inner()
    extra: dict[str, float] = field(default_factory=lambda: {"a": 1.0})


@dataclass(frozen=True)
class WithTensor:
    scale: float = 0.5
    prior: Any = None


class Rule(FedAvg):
    def __init__(self, options: Any) -> None:
        super().__init__()
        self.options = options


def test_unset_values_tuples_and_nested_tables_are_recorded_not_dropped() -> None:
    assert options_record(Rule(Nested()), "algorithm") == {"options": {"scale": 0.5, "pair": [1, 2], "inner": {"steps": 3}, "extra": {"a": 1.0}}}


def test_an_option_toml_cannot_hold_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError) as err:
        options_record(Rule(WithTensor(prior=torch.zeros(2))), "algorithm")
    assert err.value.field == "algorithm.options.prior" and "Tensor" in err.value.message


def test_a_builtin_aggregator_passed_from_python_has_its_options_in_the_saved_config(tmp_path: Any) -> None:
    """``aggregator=FedProx(FedProxOptions(mu=0.1))`` saved ``[algorithm] name = "custom"`` and its class only: ``mu`` nowhere."""
    import chillfl
    from chillfl.aggregation.fedprox import FedProx, FedProxOptions
    from chillfl.config import load_config

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 6, generator=g), torch.arange(80) % 3
    data = chillfl.TensorData(x[:60], y[:60], x[60:], y[60:], num_classes=3)
    result = chillfl.run(torch.nn.Linear(6, 3), data, {"federation": {"num_clients": 2, "rounds": 1}}, aggregator=FedProx(FedProxOptions(mu=0.1)),
                         out_dir=tmp_path, progress=False)
    assert result.folder is not None and result.config.algorithm["options"] == {"mu": 0.1, "weighting": "samples"}
    assert load_config(result.folder / "config.toml").algorithm["options"] == {"mu": 0.1, "weighting": "samples"}

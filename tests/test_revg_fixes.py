"""Review of the day's merges (revG): Python-built PA3Fed, privacy and CCVR instances held to their config's checks."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import chillfl
from chillfl.errors import ConfigError

BASE: dict[str, Any] = {"seed": 0, "dataset": {"name": "digits"}, "partition": {"name": "iid"}, "model": {"name": "mlp", "hidden": [16]},
                        "federation": {"num_clients": 4, "rounds": 1}, "client": {"epochs": 1, "batch_size": 32, "lr": 0.05},
                        "eval": {"client_split_size": 10}}


def test_pa3fed_built_in_python_refuses_a_personalising_base() -> None:
    """``PA3Fed(Ditto())`` ran, where ``base = "ditto"`` is refused: the refusal lived in the spec's builder alone."""
    from chillfl.aggregation.ditto import Ditto
    from chillfl.aggregation.pa3fed import PA3Fed

    with pytest.raises(ConfigError) as refused:
        PA3Fed(Ditto())
    assert refused.value.field == "aggregator.base" and "cannot be PA3Fed's base" in refused.value.message


def test_pa3fed_options_built_in_python_are_validated() -> None:
    from chillfl.aggregation.base import FedAvg
    from chillfl.aggregation.pa3fed import PA3Fed, PA3FedOptions

    with pytest.raises(ConfigError) as refused:
        chillfl.run(config=copy.deepcopy(BASE), aggregator=PA3Fed(FedAvg(), PA3FedOptions(delta=-2.0)), progress=False, write=False)
    assert refused.value.field == "aggregator.options.delta"


def test_privacy_reads_an_instances_spec() -> None:
    """``Ditto()`` under dp-fedavg was refused for declaring no takes_weights (its class declares nothing; its spec does),
    with advice to edit chillfl's own class, where ``name = "ditto"`` runs."""
    from chillfl.aggregation.ditto import Ditto

    config = {**copy.deepcopy(BASE), "privacy": {"mechanism": "dp-fedavg"}}
    chillfl.run(config=copy.deepcopy(config), aggregator=Ditto(), progress=False, write=False)


def test_ccvr_instance_refusal_names_no_missing_field() -> None:
    from chillfl.aggregation.ccvr import CCVR
    from chillfl.models.registry import build_model

    model = build_model("mlp", (64,), 10, {"hidden": [16]}, seed=0)
    with pytest.raises(ConfigError) as refused:
        chillfl.run(config=copy.deepcopy(BASE), aggregator=CCVR(model), progress=False, write=False)
    assert refused.value.field == "federation.rounds" and "aggregator.options.name" not in refused.value.message


def test_objective_clash_names_the_wrapped_base_of_an_instance() -> None:
    """``PA3Fed(FedProx(...))`` with ``objective.proximal_mu`` said the term came from PA3Fed's "own options"."""
    from chillfl.aggregation.fedprox import FedProx, FedProxOptions
    from chillfl.aggregation.pa3fed import PA3Fed

    config = {**copy.deepcopy(BASE), "objective": {"proximal_mu": 0.1}}
    with pytest.raises(ConfigError) as refused:
        chillfl.run(config=config, aggregator=PA3Fed(FedProx(FedProxOptions(mu=0.5))), progress=False, write=False)
    assert refused.value.field == "objective.proximal_mu"
    assert "aggregator PA3Fed already adds" in refused.value.message and "the base it wraps, FedProx" in refused.value.message

"""A plugin spec whose builder returns an instance of a class another registered spec makes (``Scaffold(2)``, ``DnC()``)
is held to that spec's checks too, as the instance passed from Python is: the config read the plugin spec's alone, so
SCAFFOLD ran with Adam and DnC drew with seed None."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
from torch import nn

import chillfl
from chillfl.aggregation import scaffold
from chillfl.aggregation.dnc import DnC, DnCOptions
from chillfl.aggregation.registry import make_aggregator
from chillfl.aggregation.scaffold import Scaffold
from chillfl.errors import ConfigError
from chillfl.extend import AlgorithmSpec, FedAvg
from test_apifix_hook_calls import CONFIG, _data


@dataclass(frozen=True)
class NoOptions:
    pass


SCAFFOLD_BUILT = AlgorithmSpec(NoOptions, lambda o, ctx: (Scaffold(ctx.num_clients), []), "SCAFFOLD, declaring nothing")
DNC_BUILT = AlgorithmSpec(NoOptions, lambda o, ctx: (DnC(), []), "DnC without the run's seed")
DNC_SEVEN = AlgorithmSpec(NoOptions, lambda o, ctx: (DnC(7), []), "DnC with its own seed")
DNC_F = AlgorithmSpec(NoOptions, lambda o, ctx: (DnC(options=DnCOptions(f=2)), []), "DnC removing 2 of a round's clients")
FEDAVG_BUILT = AlgorithmSpec(NoOptions, lambda o, ctx: (FedAvg(), []), "FedAvg, which no spec makes")
DERIVED = replace(scaffold.SPEC, summary="SCAFFOLD under another name")
"""Builds Scaffold, one of its own ``makes``: its checks are the config's, not refused by itself."""

ADAM = {"client": {"optimizer": "adam"}}


def _run(config: dict[str, Any], **parts: Any) -> Any:
    return chillfl.run(model=nn.Linear(8, 3), data=_data(), config=config, write=False, progress=False, **parts)


def _named(spec: str, **more: Any) -> dict[str, Any]:
    return {**CONFIG, "algorithm": {"name": f"{__name__}:{spec}"}, **more}


def test_a_builders_scaffold_is_refused_adam_as_an_instance_is() -> None:
    with pytest.raises(ConfigError) as by_spec:
        _run(_named("SCAFFOLD_BUILT", **ADAM))
    with pytest.raises(ConfigError) as passed:
        _run({**CONFIG, **ADAM}, aggregator=Scaffold(2))
    assert by_spec.value.field == passed.value.field == "client.optimizer"
    assert by_spec.value.message == passed.value.message


def test_a_builders_dnc_draws_from_the_runs_seed() -> None:
    """DnC() from Python takes the run's seed (its spec's bind); from a builder it kept None (drawn as 0 in every run)."""
    aggregator, _ = make_aggregator(f"{__name__}:DNC_BUILT", None, num_clients=4, model=nn.Linear(8, 3), seed=3)
    assert isinstance(aggregator, DnC) and aggregator.seed == 3


def test_a_builders_dnc_with_another_seed_is_refused_on_the_specs_name() -> None:
    with pytest.raises(ConfigError) as passed:
        _run({**CONFIG, "seed": 3}, aggregator=DnC(7))
    assert passed.value.field == "aggregator.seed"
    with pytest.raises(ConfigError) as by_spec:
        _run(_named("DNC_SEVEN", seed=3))
    assert by_spec.value.field == "algorithm.name"
    assert f"(aggregator.seed: {passed.value.message})" in by_spec.value.message and "'dnc'" in by_spec.value.message


def test_a_builders_dnc_meets_dncs_check() -> None:
    """f = 2 removes both clients of a 2-client round: DnC's own check refuses it, from Python and from a builder."""
    with pytest.raises(ConfigError) as passed:
        _run(CONFIG, aggregator=DnC(options=DnCOptions(f=2)))
    assert passed.value.field == "aggregator.options.f"
    with pytest.raises(ConfigError) as by_spec:
        _run(_named("DNC_F"))
    assert by_spec.value.field == "algorithm.name" and f"(aggregator.options.f: {passed.value.message})" in by_spec.value.message


def test_a_builders_fedavg_and_a_derived_spec_still_run() -> None:
    assert _run(_named("FEDAVG_BUILT", **ADAM)) is not None
    assert _run(_named("DERIVED")) is not None
    with pytest.raises(ConfigError) as err:  # refused once, by its own (scaffold's) declaration
        _run(_named("DERIVED", **ADAM))
    assert err.value.field == "client.optimizer"

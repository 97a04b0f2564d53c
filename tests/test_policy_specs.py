"""Temperature policies are typed specs registered next to their code; core code asks their capabilities."""

from __future__ import annotations

from typing import Callable

import pytest

from chillfl.capabilities import Capabilities
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment, check_parts
from chillfl.flower.apps import check_node_computable
from chillfl.temperature import PolicySpec, policy_capabilities, register_policy, registered_policies
from chillfl.temperature.fedchill import FedChillOptions
from chillfl.temperature.fedchill import capabilities as fedchill_capabilities

BASE = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.rounds": 1, "eval.client_split_size": 20}

PLUGIN = '''
from dataclasses import dataclass

from chillfl.extend import Capabilities, ConfigError, ConstantTemperature, PolicySpec


@dataclass(frozen=True)
class Options:
    value: float = 0.5
    central: bool = False


def check(options, config, section):
    if options.value > 1 and config.federation.rounds > 5:
        raise ConfigError(f"{section}.value", "above 1 only for short runs")


SPEC = PolicySpec(
    Options, lambda o, counts: ConstantTemperature(o.value), "a constant T, maybe central",
    capabilities=lambda o: Capabilities(on_flower="it is central", limited_by="central") if o.central else Capabilities(),
    check=check,
)
'''


@pytest.fixture
def plugin(user_module: Callable[[str, str], None]) -> str:
    user_module("ext_policy_spec", PLUGIN)
    return "ext_policy_spec:SPEC"


def test_the_built_ins_are_registered_specs_in_their_own_modules() -> None:
    specs = registered_policies()
    assert {"none", "fixed", "fedchill"} <= set(specs)
    assert all(isinstance(s, PolicySpec) for s in specs.values())
    assert specs["fixed"].build.__module__ == "chillfl.temperature.base"
    assert specs["fedchill"].capabilities is fedchill_capabilities


def test_registering_a_name_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        register_policy("fixed", PolicySpec(FedChillOptions, lambda o, c: None, "another"))  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("options", "on_flower", "limited_by"),
    [
        (FedChillOptions(), False, None),
        (FedChillOptions(normalisation="minmax"), True, "normalisation"),
        (FedChillOptions(measure="size"), True, "measure"),
        (FedChillOptions(normalisation="minmax", init=False), False, None),  # no h_n at all: nothing leaves a client
    ],
)
def test_fedchill_declares_its_flower_limit_from_its_options(options: FedChillOptions, on_flower: bool, limited_by: str | None) -> None:
    caps = fedchill_capabilities(options)
    assert (caps.on_flower is not None) == on_flower and caps.limited_by == limited_by


def test_a_plugin_policy_spec_declares_capabilities_that_the_flower_check_reads(plugin: str) -> None:
    assert policy_capabilities({"policy": plugin}) == Capabilities()
    check_node_computable(load_config(None, {**BASE, "temperature": {"policy": plugin}}))
    with pytest.raises(ConfigError) as info:
        check_node_computable(load_config(None, {**BASE, "temperature": {"policy": plugin, "central": True}}))
    assert info.value.field == "temperature.central" and "it is central" in str(info.value)


def test_a_plugin_policy_specs_check_runs_on_build_and_on_dry_run(plugin: str) -> None:
    ok = load_config(None, {**BASE, "temperature": {"policy": plugin, "value": 2.0}})
    build_experiment(ok)  # one round: allowed
    bad = load_config(None, {**BASE, "federation.rounds": 6, "temperature": {"policy": plugin, "value": 2.0}})
    for check in (build_experiment, check_parts):
        with pytest.raises(ConfigError) as info:
            check(bad)
        assert info.value.field == "temperature.value"

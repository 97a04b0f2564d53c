"""A spec whose ``options`` is not a dataclass class, whose ``summary`` is not a str, or whose ``build`` returns no
aggregator is one ConfigError on the field that named it; each was a TypeError / AttributeError traceback (exit 1)
from deep in the option parser or the declaration checks (report-apiref F2, F7). And the ``register_*`` helpers refuse a
name no config can write and an argument that is no spec before the registry is touched: ``register_algorithm(3, ...)``
was accepted and broke every later listing (F3)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.registry import registered_algorithms
from chillfl.errors import ConfigError
from chillfl.extend import AlgorithmSpec, ConstantTemperature, FedAvg, PolicySpec, register_algorithm, register_policy
from chillfl.training.terms import TermSpec, register_term


@dataclasses.dataclass(frozen=True)
class Opts:
    mu: float = 0.0


def _fedavg(options: Any, context: Any) -> Any:
    return FedAvg(), []


BAD_OPTS = AlgorithmSpec(dict, _fedavg, "s")
NONE_OPTS = AlgorithmSpec(None, _fedavg, "s")  # type: ignore[arg-type]
INSTANCE_OPTS = AlgorithmSpec(Opts(), _fedavg, "s")  # type: ignore[arg-type]
NUMBER_SUMMARY = AlgorithmSpec(Opts, _fedavg, 5)  # type: ignore[arg-type]
BUILD_RETURNS_WRONG = AlgorithmSpec(Opts, lambda o, c: (3, []), "s")  # type: ignore[arg-type, return-value]
POL_BAD_OPTS = PolicySpec(dict, lambda o, c: ConstantTemperature(1.0), "x")
TERM_BAD_OPTS = TermSpec(dict, lambda o: None, "x")  # type: ignore[arg-type, return-value]

CONFIG = {"federation": {"num_clients": 2, "rounds": 1}}


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 8, generator=g), torch.randint(0, 3, (60,), generator=g)
    return chillfl.TensorData(x[:48], y[:48], x[48:], y[48:], num_classes=3)


def _with(table: str, key: str, value: Any) -> dict[str, Any]:
    return {**CONFIG, table: {key: value}}


@pytest.mark.parametrize(("config", "field", "words"), [
    (_with("algorithm", "name", f"{__name__}:BAD_OPTS"), "algorithm.name", "its AlgorithmSpec's options must be a dataclass (the class, not an instance), got <class 'dict'>"),
    (_with("algorithm", "name", f"{__name__}:NONE_OPTS"), "algorithm.name", "options must be a dataclass (the class, not an instance), got None"),
    (_with("algorithm", "name", f"{__name__}:INSTANCE_OPTS"), "algorithm.name", "got Opts(mu=0.0)"),
    (_with("algorithm", "name", f"{__name__}:NUMBER_SUMMARY"), "algorithm.name", "its AlgorithmSpec's summary must be a str, got 5"),
    (_with("algorithm", "name", f"{__name__}:BUILD_RETURNS_WRONG"), "algorithm.name", "build returned 3 as the aggregator, which is not an aggregator: it lacks downlink"),
    (_with("temperature", "policy", f"{__name__}:POL_BAD_OPTS"), "temperature.policy", "its PolicySpec's options must be a dataclass"),
    (_with("objective", "terms", [f"{__name__}:TERM_BAD_OPTS"]), "objective.terms[0]", "its TermSpec's options must be a dataclass"),
], ids=["dict", "none", "instance", "summary", "build", "policy", "term"])
def test_a_malformed_spec_is_one_line(config: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config=config, write=False, progress=False)
    assert err.value.field == field and words in err.value.message, err.value


SPEC = AlgorithmSpec(Opts, _fedavg, "s")


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: register_algorithm(3, SPEC), TypeError, "register_algorithm: name must be a str, got 3 (int)"),  # type: ignore[arg-type]
    (lambda: register_algorithm("", SPEC), ValueError, "register_algorithm: name must be a non-empty word without whitespace, got ''"),
    (lambda: register_algorithm("   ", SPEC), ValueError, "got '   '"),
    (lambda: register_algorithm("Has Space", SPEC), ValueError, "got 'Has Space'"),
    (lambda: register_algorithm("apifix_x", "notaspec"), TypeError, "register_algorithm: spec must be a chillfl.extend.AlgorithmSpec, got 'notaspec' (str)"),  # type: ignore[arg-type]
    (lambda: register_term("apifix_t", "nope"), TypeError, "register_term: spec must be a chillfl.extend.TermSpec"),  # type: ignore[arg-type]
    (lambda: register_policy("apifix_p", None), TypeError, "register_policy: spec must be a chillfl.extend.PolicySpec, got None"),  # type: ignore[arg-type]
    (lambda: register_algorithm("apifix_bad_options", BAD_OPTS), ConfigError, "options must be a dataclass"),
], ids=["int", "empty", "blank", "space", "str-spec", "term", "policy", "options"])
def test_a_bad_registration_is_refused_before_the_registry_changes(call: Callable[[], Any], error: type[Exception], words: str) -> None:
    before = registered_algorithms()
    with pytest.raises(error) as err:
        call()
    assert words in str(err.value), err.value
    assert registered_algorithms() == before
    assert "fedavg" in chillfl.available()["algorithms"]  # a listing still sorts the names

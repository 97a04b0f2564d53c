"""Declared bounds (``options.Scale``) hold for options built in Python too (cfgblank 2).

parse_options refused ``lam = 1e308`` on a config's table, but an instance's options passed from Python (a user
aggregator's, a wrapper's base's, a term's, a policy's) were never parsed: ``aggregator=Mine(Options(w=1e308))`` ran.
They are now checked where the run takes the instance (``api.as_plugged``), each refusal on ``<part>.options.<field>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

import chillfl
from chillfl.aggregation.ditto import Ditto, DittoOptions
from chillfl.aggregation.perfedavg import PerFedAvgOptions
from chillfl.errors import ConfigError
from chillfl.extend import AroundAggregator, ConstantTemperature, FedAvg
from chillfl.options import FLOAT32_MAX, Scale, check_built, parse_options

TINY: dict[str, Any] = {
    "seed": 0, "executor": "sequential", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
    "partition": {"name": "iid"}, "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 1},
    "client": {"lr": 0.1, "batch_size": 64, "epochs": 1}, "eval": {"clients": "none"},
}


@dataclass(frozen=True)
class Weights:
    w: Scale = 1.0
    plain: float = 0.0  # no bound declared


@dataclass(frozen=True)
class Nested:
    inner: Weights = field(default_factory=Weights)


class Mine(FedAvg):
    """A user's aggregator keeping an options dataclass (docs/extending.md's pattern); it reads none of it."""

    def __init__(self, options: Any) -> None:
        super().__init__()
        self.options = options


class Around(AroundAggregator):
    pass


class Weighted:
    """A user's loss term with options: 0 whatever they say."""

    reads: tuple[str, ...] = ()

    def __init__(self, options: Weights) -> None:
        self.options = options

    def __call__(self, params: Any, context: Any) -> torch.Tensor:
        return torch.zeros(())


class MyPolicy(ConstantTemperature):
    def __init__(self, options: Weights) -> None:
        super().__init__(1.0)
        self.options = options  # type: ignore[assignment]


def refusal(**parts: Any) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        chillfl.run(config=TINY, write=False, progress=False, **parts)
    return caught.value


@pytest.mark.parametrize("parts, field", [
    ({"aggregator": Mine(Weights(w=1e308))}, "aggregator.options.w"),
    ({"aggregator": Mine(Weights(w=-1e39))}, "aggregator.options.w"),  # a size
    ({"aggregator": Around(Mine(Weights(w=1e308)))}, "aggregator.base.options.w"),
    ({"aggregator": FedAvg(), "terms": [Weighted(Weights(w=1e308))]}, "terms[0].options.w"),
    ({"policy": MyPolicy(Weights(w=1e308))}, "policy.options.w"),
    ({"aggregator": Mine(Nested(Weights(w=1e308)))}, "aggregator.options.inner.w"),
])
def test_a_scale_past_float32_built_in_python_is_refused_on_its_field(parts: dict[str, Any], field: str) -> None:
    err = refusal(**parts)
    assert err.field == field and err.message.startswith("must be at most 3.403e+38 in size (the largest float32")


def test_a_non_finite_or_huge_integer_scale_is_one_line_not_a_traceback() -> None:
    """A parsed table never holds NaN (coerce refuses it), and NaN passed ``abs(x) > bound``; an int of 400 digits
    has no float to format with ``:g`` (OverflowError)."""
    assert str(refusal(aggregator=Mine(Weights(w=math.nan)))) == "aggregator.options.w: must be a finite number, got nan"
    assert str(refusal(aggregator=Mine(Weights(w=-math.inf)))) == "aggregator.options.w: must be a finite number, got -inf"
    err = refusal(aggregator=Mine(Weights(w=10**400)))
    assert err.field == "aggregator.options.w" and err.message.endswith("got an integer of about 401 digits")


def test_a_chillfl_method_built_in_python_is_refused_as_its_table_is() -> None:
    err = refusal(aggregator=Ditto(DittoOptions(lam=1e308)))
    with pytest.raises(ConfigError) as parsed:
        parse_options(DittoOptions, {"lam": 1e308}, "aggregator.options")
    assert (err.field, err.message) == (parsed.value.field, parsed.value.message)
    assert err.field == "aggregator.options.lam"


def test_values_within_the_bound_and_unbounded_fields_pass() -> None:
    check_built(Weights(w=FLOAT32_MAX, plain=1e308), "x")  # the bound itself; `plain` declares none
    check_built(Nested(), "x")
    check_built(object(), "x")  # no dataclass: nothing to check
    check_built(Weights, "x")  # a class, not an instance
    # perfedavg's beta is no Scale: tests forge non-finite uploads with a huge meta step (test_fuzzfix*)
    check_built(PerFedAvgOptions(beta=1e308), "algorithm")


def test_a_class_whose_annotations_do_not_resolve_declares_no_bound() -> None:
    @dataclass(frozen=True)
    class Local:
        w: LocalOnly = None  # type: ignore[name-defined]  # noqa: F821  (a name get_type_hints cannot find)

    check_built(Local(), "x")  # not a NameError

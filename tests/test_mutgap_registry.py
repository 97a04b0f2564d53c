"""Edges of the refusal of a class named by import path that a bind-less spec makes (mut102 R1, R8, R11, R13): a run
value it takes with a default of its own runs; ``rounds=None`` is refused as ``seed=None`` is; a class without an
``Options`` dataclass is refused where the spec is looked up, before anything is built; a bind keeps the run's count."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from chillfl.aggregation.registry import algorithm_spec, run_value
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from test_bindfix_registry import scratch_registry  # noqa: F401 - the fixture, restoring the registry after each test
from test_plugfix_path_bind import config

RULES = '''
from dataclasses import dataclass

from chillfl.extend import AggregatorBase, AlgorithmSpec, register_algorithm


@dataclass(frozen=True)
class GapOptions:
    shift: float = 0.0


class First(AggregatorBase):
    Options = GapOptions

    def __init__(self, options=GapOptions(), seed=0):
        self.options, self.seed = options, seed

    def aggregate(self, global_params, results, round):
        return dict(results[0].params)


class OwnDefault(First):
    """A seed with a default of its own (not None): it runs at that seed."""

    def __init__(self, options=GapOptions(), seed=7):
        super().__init__(options, seed)


class NeedsRounds(First):
    """Takes the run's rounds, which nothing gives a class named by path."""

    def __init__(self, options=GapOptions(), seed=0, rounds=None):
        super().__init__(options, seed)
        self.rounds = rounds


class Bare(AggregatorBase):
    """No Options dataclass: built as Bare()."""

    def __init__(self, seed=None):
        self.seed = seed

    def aggregate(self, global_params, results, round):
        return dict(results[0].params)


register_algorithm("mutgap_unbound", AlgorithmSpec(GapOptions, lambda o, ctx: (First(o, ctx.seed), []), "no bind",
                                                   makes=(OwnDefault, NeedsRounds, Bare)))
'''


@pytest.fixture()
def rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_registry: None) -> Iterator[Path]:  # noqa: F811
    (tmp_path / "mutgap_rules.py").write_text(RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("mutgap_rules", None)


def test_a_run_value_with_its_own_default_is_not_refused_though_an_unbinding_spec_makes_it(rules: Path) -> None:
    aggregator = build_experiment(config("mutgap_rules:OwnDefault")).aggregator
    assert aggregator.seed == 7  # type: ignore[attr-defined]


def test_rounds_none_is_refused_as_seed_none_is(rules: Path) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config("mutgap_rules:NeedsRounds"))
    assert err.value.field == "algorithm.name" and "takes the run's rounds in its constructor" in err.value.message


def test_a_class_without_options_is_refused_where_its_spec_is_looked_up(rules: Path) -> None:
    """By the lookup itself, as a class with ``Options`` is (its build refuses it again): what reads a spec without building
    it is told too."""
    with pytest.raises(ConfigError) as err:
        algorithm_spec("mutgap_rules:Bare")
    assert err.value.field == "algorithm.name" and "takes the run's seed in its constructor" in err.value.message


@pytest.mark.parametrize("given", [3.0, np.int64(3)], ids=["float", "np.int64"])
def test_a_bind_keeps_the_runs_count_not_an_equal_number_of_another_type(given: object) -> None:
    """``num_clients=3.0`` equals the run's 3: the aggregator gets the run's int (``range(3.0)`` is a TypeError)."""
    got = run_value(given, 3, "aggregator.num_clients", "federation.num_clients")
    assert got == 3 and type(got) is int

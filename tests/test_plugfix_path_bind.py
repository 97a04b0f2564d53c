"""A class named by import path (``algorithm.name = "pkg:Rule"``) is bound to the run through the spec that makes it,
as an instance passed from Python is (``bind_instance``); one that takes a run value in its constructor that no spec's
``bind`` fills is refused in one line on ``algorithm.name``, before the run, not a TypeError at its first draw."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment
from test_bindfix_registry import scratch_registry  # noqa: F401 - the fixture, restoring the registry after each test
from test_plugins import BASE

RULES = '''
from dataclasses import dataclass

import torch

from chillfl.extend import AggregatorBase, AlgorithmSpec, derive_seed, register_algorithm


@dataclass(frozen=True)
class PickOptions:
    shift: float = 0.0


class RandomPick(AggregatorBase):
    """Takes one upload drawn from the run's seeded stream: it needs the run seed."""

    Options = PickOptions

    def __init__(self, options=PickOptions(), seed=None):
        self.options, self.seed = options, seed

    def aggregate(self, global_params, results, round):
        g = torch.Generator().manual_seed(derive_seed(self.seed, "plugfix-pick", round))
        i = int(torch.randint(len(results), (1,), generator=g))
        return dict(results[i].params)


def _bind(aggregator, ctx):
    if aggregator.seed is None:
        aggregator.seed = ctx.seed


PICK = register_algorithm("plugfix_pick", AlgorithmSpec(PickOptions, lambda o, ctx: (RandomPick(o, ctx.seed), []), "one upload at random",
                                                        makes=(RandomPick,), bind=_bind))


class Unmade(RandomPick):
    """The same rule, which no spec makes: bound by the spec that makes the class it derives from (registry.binder)."""

    Options = PickOptions


class Own(AggregatorBase):
    """A user's own rule, derived from no class a spec makes: its None seed means "unset" here, handled by itself."""

    def __init__(self, seed=None):
        self.seed = seed

    def aggregate(self, global_params, results, round):
        return dict(results[0].params)


class MadeUnbound(RandomPick):
    """Made by a spec that has no bind: nothing gives it the seed either."""

    Options = PickOptions


UNBOUND = register_algorithm("plugfix_unbound", AlgorithmSpec(PickOptions, lambda o, ctx: (MadeUnbound(o, ctx.seed), []), "no bind",
                                                              makes=(MadeUnbound,)))


class Defaulted(RandomPick):
    """Takes a seed with a default of its own: it runs (at that seed), so it is not refused."""

    Options = PickOptions

    def __init__(self, options=PickOptions(), seed=7):
        super().__init__(options, seed)
'''


@pytest.fixture()
def rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_registry: None) -> Iterator[Path]:  # noqa: F811
    (tmp_path / "plugfix_rules.py").write_text(RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("plugfix_rules", None)


def config(name: str, seed: int = 3, rounds: int = 1):  # type: ignore[no-untyped-def]
    return load_config(None, {**BASE, "seed": seed, "federation.rounds": rounds, "algorithm": {"name": name}})


def test_a_class_a_spec_makes_named_by_path_gets_the_run_seed_through_its_bind(rules: Path) -> None:
    aggregator = build_experiment(config("plugfix_rules:RandomPick", seed=3)).aggregator
    assert type(aggregator).__name__ == "RandomPick" and aggregator.seed == 3  # type: ignore[attr-defined]
    result = run_experiment(config("plugfix_rules:RandomPick", seed=5), write=False, progress=False)  # TypeError at the first draw before
    assert len(result.records) == 1


def test_a_path_named_class_draws_as_the_spec_named_in_the_config_does(rules: Path) -> None:
    by_path = run_experiment(config("plugfix_rules:RandomPick", rounds=2), write=False, progress=False).records
    by_spec = run_experiment(config("plugfix_pick", rounds=2), write=False, progress=False).records
    assert [r["global_acc"] for r in by_path] == [r["global_acc"] for r in by_spec]


def test_a_path_named_class_its_unbinding_spec_makes_is_one_line_naming_the_spec(rules: Path) -> None:
    """Its spec's build passes the run's seed; named by path it would get None: refused, naming the spec that runs it."""
    with pytest.raises(ConfigError) as err:
        build_experiment(config("plugfix_rules:MadeUnbound"))
    assert err.value.field == "algorithm.name"
    assert "'plugfix_rules:MadeUnbound' takes the run's seed in its constructor, which a class named by import path is not given" in err.value.message
    assert "name its spec, 'plugfix_unbound'" in err.value.message


def test_a_class_no_spec_makes_is_not_refused_for_a_none_default(rules: Path) -> None:
    """A user's own class may mean "unset" by a None default and handle it (rev102b: such plugins, which ran, were refused
    by their parameter names): it is built as it was, None and all."""
    aggregator = build_experiment(config("plugfix_rules:Own")).aggregator
    assert aggregator.seed is None  # type: ignore[attr-defined]


def test_a_run_value_with_a_default_of_its_own_is_not_refused(rules: Path) -> None:
    aggregator = build_experiment(config("plugfix_rules:Defaulted")).aggregator
    assert aggregator.seed == 7  # type: ignore[attr-defined]

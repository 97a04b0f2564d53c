"""A subclass of a class a registered spec makes, which no spec makes itself, is bound to the run by that spec's
``bind`` (registry.binder): ``class MyDnC(DnC)`` named by path, or passed from Python, kept ``seed=None`` and drew as
seed 0 in every run, so each seed of a comparison drew alike, silently (rev102c). Its checks stay its own (exact type)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from chillfl.aggregation.dnc import DnC, DnCOptions
from chillfl.aggregation.registry import binder, binds_to_run, made_by
from chillfl.config import load_config
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment
from test_bindfix_registry import scratch_registry  # noqa: F401 - the fixture rules needs
from test_plugfix_path_bind import config, rules  # noqa: F401 - the fixture: plugfix_rules on sys.path, the registry restored
from test_plugins import BASE
from test_pyagg_bind import same, state

SUBCLASSES = '''
from chillfl.aggregation.dnc import DnC, DnCOptions


class MyDnC(DnC):
    """DnC dropping one client a round (f = 1), whose coordinates are drawn from the seed: a user's subclass."""

    def __init__(self, seed=None, options=DnCOptions(f=1, subsample=3)):
        super().__init__(seed, options)
'''


@pytest.fixture()
def my_dnc(rules: Path) -> Iterator[Path]:  # noqa: F811
    (rules / "mro_rules.py").write_text(SUBCLASSES)
    yield rules
    sys.modules.pop("mro_rules", None)


def test_a_path_named_subclass_of_a_seeded_rule_takes_each_runs_seed(my_dnc: Path) -> None:
    seeds = [build_experiment(config("mro_rules:MyDnC", seed=s)).aggregator.seed for s in (1, 2)]  # type: ignore[attr-defined]
    assert seeds == [1, 2]  # None, None before: seed 0's draws in both


def dnc_config(name: str, seed: int):  # type: ignore[no-untyped-def]
    """Two rounds of DnC that drops one client a round (f = 1): its coordinates are drawn from the seed."""
    table = {"name": name} if ":" in name else {"name": name, "f": 1, "subsample": 3}  # MyDnC's own defaults
    return load_config(None, {**BASE, "seed": seed, "federation.rounds": 2, "algorithm": table})


def test_a_path_named_subclass_draws_as_its_base_does(my_dnc: Path) -> None:
    for seed in (1, 2):
        by_path = run_experiment(dnc_config("mro_rules:MyDnC", seed), write=False, progress=False).records
        by_name = run_experiment(dnc_config("dnc", seed), write=False, progress=False).records
        assert [r["global_acc"] for r in by_path] == [r["global_acc"] for r in by_name]


def test_a_subclass_passed_from_python_is_bound_as_its_base_is(my_dnc: Path) -> None:
    from mro_rules import MyDnC  # type: ignore[import-not-found]

    instance = MyDnC()
    found = binder(instance)
    assert found is not None and found[0] == "dnc" and binds_to_run(instance)
    maker = made_by(MyDnC)
    assert maker is not None and maker[0] == "dnc"
    assert same(state({"name": "fedavg"}, aggregator=MyDnC()),
                state({"name": "fedavg"}, aggregator=DnC(None, DnCOptions(f=1, subsample=3))))  # seed 0's draws before, the run's 3 now


def test_the_base_class_itself_is_unchanged() -> None:
    found = binder(DnC())
    assert found is not None and found[0] == "dnc"

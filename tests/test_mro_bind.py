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
from chillfl.aggregation.fednova import FedNova
from chillfl.aggregation.pa3fed import PA3Fed
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment
from test_bindfix_registry import scratch_registry  # noqa: F401 - the fixture rules needs
from test_plugfix_path_bind import config, rules  # noqa: F401 - the fixture: plugfix_rules on sys.path, the registry restored
from test_plugins import BASE
from test_pyagg_bind import same, state

SUBCLASSES = '''
from dataclasses import dataclass

from chillfl.aggregation.dnc import DnC, DnCOptions
from chillfl.aggregation.fednova import FedNova
from chillfl.aggregation.robust import Krum, KrumOptions
from chillfl.capabilities import Capabilities


class MyNova(FedNova):
    """FedNova as it is: its bind fills the client momentum from the run."""


class MyDnC(DnC):
    """DnC dropping one client a round (f = 1), whose coordinates are drawn from the seed: a user's subclass."""

    def __init__(self, seed=None, options=DnCOptions(f=1, subsample=3)):
        super().__init__(seed, options)


@dataclass(frozen=True)
class ExtraOptions(DnCOptions):
    """DnC's options and one of the subclass's own: not DnC's spec's to check (rev103a)."""

    extra: float = 0.5


class DnCExtra(DnC):
    Options = ExtraOptions

    def __init__(self, options=ExtraOptions(), seed=None):
        super().__init__(seed, options)


class KrumSeeded(Krum):
    """Krum (whose spec has no bind) with a seed of its own that it handles itself, None meaning 0."""

    def __init__(self, options=KrumOptions(), seed=None):
        super().__init__(options)
        self.my_seed = 0 if seed is None else seed


class OwnInitDnC(DnC):
    """A DnC subclass with an __init__ of its own that skips DnC's: no seed for DnC's bind to take (rev103d)."""

    def __init__(self, rng_seed=0):
        self.rng_seed = rng_seed
        self.options = DnCOptions()


class OwnInitNova(FedNova):
    """A FedNova subclass that declares takes_weights (a PA3Fed base) and skips FedNova's __init__: no options for its
    bind to read (not even the parameter keys the run's model fills: an AttributeError traceback before the bind's
    one-line refusal, until OnParameters gave param_keys a class default)."""

    capabilities = Capabilities(takes_weights=True)

    def __init__(self):
        pass


class DnCFixed(DnC):
    """A subclass that fixes its own seed: it runs as it is built."""

    def __init__(self):
        super().__init__(7, DnCOptions())
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
    assert made_by(MyDnC) is None  # no spec makes it: its None is not refused, a base's bind fills it
    assert same(state({"name": "fedavg"}, aggregator=MyDnC()),
                state({"name": "fedavg"}, aggregator=DnC(None, DnCOptions(f=1, subsample=3))))  # seed 0's draws before, the run's 3 now


def test_the_base_class_itself_is_unchanged() -> None:
    found = binder(DnC())
    assert found is not None and found[0] == "dnc"


@pytest.mark.parametrize("table", [{"name": "mro_rules:DnCExtra", "extra": 0.1}, {"name": "mro_rules:DnCExtra"}])
def test_a_subclass_with_options_of_its_own_is_bound_without_its_bases_option_check(my_dnc: Path, table: dict[str, object]) -> None:
    """Its own option is no DnC option: the base's bind fills the seed, the base's option parsing is not borrowed."""
    exp = build_experiment(load_config(None, {**BASE, "seed": 4, "algorithm": table}))
    assert exp.aggregator.seed == 4  # type: ignore[attr-defined]


def test_a_subclass_of_a_rule_whose_spec_has_no_bind_is_not_refused_for_its_own_none(my_dnc: Path) -> None:
    """KrumSeeded handles its None itself; naming krum instead would drop it: not refused, as before."""
    exp = build_experiment(load_config(None, {**BASE, "algorithm": {"name": "mro_rules:KrumSeeded"}}))
    assert exp.aggregator.my_seed == 0  # type: ignore[attr-defined]


def test_a_subclass_that_fixes_its_own_seed_is_refused_as_its_base_is(my_dnc: Path) -> None:
    """DnC(7) is refused (seed 7 drew every run's alike); a subclass fixing 7 in its constructor is too (rev103c)."""
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "seed": 2, "algorithm": {"name": "mro_rules:DnCFixed"}}))
    assert "must equal the run's seed = 2, got 7" in err.value.message


def test_a_subclass_takes_the_run_values_its_base_takes(my_dnc: Path) -> None:
    """The base's bind fills more than a None seed: FedNova's client momentum (MyNova() ran with momentum 0 under
    client.momentum = 0.9 when only a None run value bound it, rev103c)."""
    from mro_rules import MyNova  # type: ignore[import-not-found]

    extra = {"client.momentum": 0.9}
    assert same(state({"name": "fedavg"}, extra, aggregator=MyNova()), state({"name": "fedavg"}, extra, aggregator=FedNova()))


def test_a_subclass_without_what_its_bases_bind_needs_is_one_line(my_dnc: Path) -> None:
    """An AttributeError traceback (exit 1) from DnC's bind, by path, from Python and as PA3Fed's base: one line naming
    what named it, chained to the AttributeError; DnC's own error (the spec's class) is raised as it is (rev103e)."""
    from mro_rules import OwnInitDnC  # type: ignore[import-not-found]

    with pytest.raises(ConfigError) as by_path:
        build_experiment(load_config(None, {**BASE, "algorithm": {"name": "mro_rules:OwnInitDnC"}}))
    assert by_path.value.field == "algorithm.name"
    assert by_path.value.message.startswith("OwnInitDnC derives from DnC, whose binding to the run (the bind of spec 'dnc') needs what it lacks")
    assert "call DnC's __init__ (super().__init__)" in by_path.value.message
    with pytest.raises(ConfigError) as from_python:
        state({"name": "fedavg"}, aggregator=OwnInitDnC())
    assert from_python.value.field == "aggregator"
    assert isinstance(from_python.value.__cause__, AttributeError)  # chained: the traceback kept
    from mro_rules import OwnInitNova  # type: ignore[import-not-found]

    with pytest.raises(ConfigError) as base_by_path:  # PA3Fed's base, named by path
        build_experiment(load_config(None, {**BASE, "algorithm": {"name": "pa3fed", "base": "mro_rules:OwnInitNova"}}))
    assert base_by_path.value.field == "algorithm.base"
    assert base_by_path.value.message.startswith("OwnInitNova derives from FedNova")
    with pytest.raises(ConfigError) as base_from_python:
        state({"name": "fedavg"}, aggregator=PA3Fed(OwnInitNova()))
    assert base_from_python.value.field == "aggregator.base"
    own = DnC()
    del own.seed  # the spec's own class: its bug, raised as it is
    with pytest.raises(AttributeError, match="'DnC' object has no attribute 'seed'"):
        state({"name": "fedavg"}, aggregator=own)

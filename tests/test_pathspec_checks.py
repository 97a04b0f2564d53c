"""A class a config names by import path (``algorithm.name = "pkg:Rule"``) is held to the spec that makes it (``makes=``,
or the one it names by ``built_by``) once built, as an instance passed from Python is (``check_instance``): that spec's
``check``, ``check_model`` and declared capabilities, not the class's own declarations alone (pathspec #1), and a class
that names a spec without a ``bind`` is refused in one line, not a TypeError at its first draw (pathspec #2)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from test_bindfix_registry import scratch_registry  # noqa: F401 - the fixture, restoring the registry after each test
from test_plugins import BASE

RULES = '''
from dataclasses import dataclass

import torch

from chillfl.aggregation.robust import Krum, KrumOptions
from chillfl.errors import ConfigError
from chillfl.extend import AggregatorBase, AlgorithmSpec, Capabilities, FedAvg, derive_seed, register_algorithm


@dataclass(frozen=True)
class CapOptions:
    cap: int = 1


def _check(options, config, section):
    if options.cap >= config.federation.sample_size():
        raise ConfigError(f"{section}.cap", f"must be below the clients a round, got {options.cap}")


def _check_model(options, model):
    if options.cap == 2:
        raise ConfigError("model.name", "cap = 2 needs another model")


class Capped(AggregatorBase):
    """Made by a spec that checks its option against the run and the model, and limits the client optimiser."""

    Options = CapOptions

    def __init__(self, options=CapOptions()):
        self.options = options

    def aggregate(self, global_params, results, round):
        return dict(results[0].params)


CAPPED = register_algorithm("pathspec_capped", AlgorithmSpec(CapOptions, lambda o, ctx: (Capped(o), []), "capped", check=_check,
                                                             check_model=_check_model, makes=(Capped,),
                                                             capabilities=Capabilities(plain_sgd="its server step")))


class Weighted(FedAvg):
    """A weighted mean a wrapper may reweight (PA3Fed's base), made by a spec with the same check."""

    Options = CapOptions
    capabilities = Capabilities(takes_weights=True)

    def __init__(self, options=CapOptions()):
        super().__init__()
        self.options = options


register_algorithm("pathspec_weighted", AlgorithmSpec(CapOptions, lambda o, ctx: (Weighted(o), []), "weighted", check=_check, makes=(Weighted,),
                                                      capabilities=Capabilities(takes_weights=True)))


class NamedKrum(Krum):
    """A plugin's subclass of a built-in class that names the built-in's spec."""

    Options = KrumOptions

    def built_by(self):
        return "krum", self.options


@dataclass(frozen=True)
class PickOptions:
    shift: float = 0.0


class Pick(AggregatorBase):
    """Draws from the run's seed; names its spec per instance."""

    Options = PickOptions
    spec = "pathspec_pick_unbound"

    def __init__(self, options=PickOptions(), seed=None):
        self.options, self.seed = options, seed

    def built_by(self):
        return self.spec, self.options

    def aggregate(self, global_params, results, round):
        g = torch.Generator().manual_seed(derive_seed(self.seed, "pathspec-pick", round))
        return dict(results[int(torch.randint(len(results), (1,), generator=g))].params)


class BoundPick(Pick):
    Options = PickOptions
    spec = "pathspec_pick_bound"


def _bind(aggregator, ctx):
    if aggregator.seed is None:
        aggregator.seed = ctx.seed


register_algorithm("pathspec_pick_unbound", AlgorithmSpec(PickOptions, lambda o, ctx: (Pick(o, ctx.seed), []), "no bind"))
register_algorithm("pathspec_pick_bound", AlgorithmSpec(PickOptions, lambda o, ctx: (BoundPick(o, ctx.seed), []), "a bind", bind=_bind))
'''


@pytest.fixture()
def rules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scratch_registry: None) -> Iterator[Path]:  # noqa: F811
    (tmp_path / "pathspec_rules.py").write_text(RULES)
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("pathspec_rules")  # its specs registered, as a plugin's module registers them
    yield tmp_path
    sys.modules.pop("pathspec_rules", None)


def config(algorithm: dict[str, Any], **overrides: Any):  # type: ignore[no-untyped-def]
    return load_config(None, {**BASE, "seed": 3, **overrides, "algorithm": algorithm})


def refusal(algorithm: dict[str, Any], **overrides: Any) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(algorithm, **overrides))
    return err.value


@pytest.mark.parametrize(("table", "overrides", "field"), [
    ({"cap": 50}, {}, "algorithm.cap"),  # the spec's check against the clients a round
    ({"cap": 2}, {}, "model.name"),  # its check_model
    ({}, {"client.optimizer": "adam"}, "client.optimizer"),  # its declared plain-SGD limit
], ids=["check", "check_model", "capabilities"])
def test_a_path_named_class_is_refused_as_its_spec_is(rules: Path, table: dict[str, Any], overrides: dict[str, Any], field: str) -> None:
    by_spec = refusal({"name": "pathspec_capped", **table}, **overrides)
    by_path = refusal({"name": "pathspec_rules:Capped", **table}, **overrides)  # built and run before
    assert by_path.field == by_spec.field == field
    assert by_path.message == by_spec.message


def test_a_wrappers_base_named_by_path_is_held_to_its_spec(rules: Path) -> None:
    by_path = refusal({"name": "pa3fed", "base": "pathspec_rules:Weighted", "base_options": {"cap": 50}})
    by_spec = refusal({"name": "pa3fed", "base": "pathspec_weighted", "base_options": {"cap": 50}})
    assert by_path.field == by_spec.field == "algorithm.base_options.cap" and by_path.message == by_spec.message


def test_a_subclass_of_a_built_in_naming_its_spec_meets_its_check(rules: Path) -> None:
    """A Krum subclass that names Krum's spec (``built_by``), named by path: Krum's f against the clients a round."""
    by_path = refusal({"name": "pathspec_rules:NamedKrum", "f": 5})
    assert by_path.field == "algorithm.f" and by_path.message == refusal({"name": "krum", "f": 5}).message


def test_a_built_in_class_named_by_path_reads_its_specs_capabilities() -> None:
    """FedNova's spec limits the client optimiser; Ditto's declares the personal model its half keeps (its class
    declares nothing): named by path, Adam is refused under the first and the second runs, as the spec's name does."""
    err = refusal({"name": "chillfl.aggregation.fednova:FedNova"}, **{"client.optimizer": "adam"})
    assert err.field == "client.optimizer" and "needs optimizer = 'sgd'" in err.message
    assert type(build_experiment(config({"name": "chillfl.aggregation.ditto:Ditto"})).aggregator).__name__ == "Ditto"


def test_a_class_naming_a_spec_without_a_bind_is_one_line(rules: Path) -> None:
    """Named by path it is built as Pick(options), seed None, and its spec, known once built, fills nothing: one line on
    algorithm.name naming that spec (a TypeError at the first draw before)."""
    err = refusal({"name": "pathspec_rules:Pick"})
    assert err.field == "algorithm.name"
    assert "'pathspec_rules:Pick' takes the run's seed in its constructor" in err.message and "name its spec, 'pathspec_pick_unbound'" in err.message


def test_a_class_naming_a_spec_with_a_bind_gets_the_run_seed(rules: Path) -> None:
    aggregator = build_experiment(config({"name": "pathspec_rules:BoundPick"})).aggregator
    assert aggregator.seed == 3  # type: ignore[attr-defined]

"""A built-in aggregator passed from Python meets the checks of the method a config names: the spec that makes its class
(``AlgorithmSpec.makes``) is found by the instance's type, its options read from the instance (check_instance)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import torch

import chillfl
from chillfl.aggregation.fedavg import FedAvg
from chillfl.aggregation.pa3fed import PA3Fed
from chillfl.aggregation.qffl import Qffl
from chillfl.aggregation import registry
from chillfl.aggregation.registry import AlgorithmSpec, _no_check, make_aggregator, registered_algorithms
from chillfl.aggregation.robust import Krum, KrumOptions
from chillfl.aggregation.scaffold import Scaffold
from chillfl.config import RunConfig
from chillfl.errors import ConfigError

X = torch.randn(12, 2, generator=torch.Generator().manual_seed(0))
Y = torch.tensor([0, 1] * 6)


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def run(aggregator: Any = None, algorithm: dict[str, Any] | None = None, rounds: int = 1, **client: Any) -> Any:
    config: dict[str, Any] = {"federation": {"num_clients": 4, "rounds": rounds}, "client": {"lr": 0.1, "batch_size": 100, **client},
                              "eval": {"clients": "none", "client_split": "none"}}
    if algorithm is not None:
        config["algorithm"] = algorithm
    return chillfl.run(model=model(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config, aggregator=aggregator,
                       write=False, progress=False)


def refusal(**kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        run(**kwargs)
    return info.value


@pytest.mark.parametrize(("instance", "table"), [
    (lambda: Scaffold(4), {"name": "scaffold"}),
    (lambda: PA3Fed(Scaffold(4)), {"name": "pa3fed", "base": "scaffold"}),
    (lambda: Qffl(), {"name": "qffl"}),
], ids=["scaffold", "pa3fed-over-scaffold", "qffl-check"])
def test_instance_refused_as_the_config_method(instance: Any, table: dict[str, Any]) -> None:
    """Adam under a plain-SGD limit (SCAFFOLD's, PA3Fed's base's) or a spec check (q-FFL's L = 1/lr): the same line."""
    from_python = refusal(aggregator=instance(), optimizer="adam")
    from_config = refusal(algorithm=table, optimizer="adam")
    assert from_python.field == from_config.field == "client.optimizer"
    assert from_python.message.replace("aggregator.options.", "algorithm.") == from_config.message  # an option: the instance's


def test_instance_spec_check_names_the_instance_option() -> None:
    """pFedSim's warm-up against the rounds: ``aggregator.options.warmup`` where a config says ``algorithm.warmup``."""
    pfedsim, _ = make_aggregator("pfedsim", {"warmup": 3}, num_clients=4, model=model(), seed=0)
    err = refusal(aggregator=pfedsim, rounds=3)
    assert err.field == "aggregator.options.warmup" and "must be < federation.rounds (3)" in err.message
    assert refusal(algorithm={"name": "pfedsim", "warmup": 3}, rounds=3).field == "algorithm.warmup"


def test_instance_with_a_personal_model_its_spec_declares_runs() -> None:
    """pFedSim's class declares nothing; its spec declares the personal model its client half keeps, and that counts."""
    pfedsim, _ = make_aggregator("pfedsim", {"warmup": 0.5}, num_clients=4, model=model(), seed=0, rounds=2)
    assert run(aggregator=pfedsim, rounds=2) is not None


@pytest.mark.parametrize("name", ["ditto", "fedrep", "local_only"])
def test_personal_model_instances_run(name: str) -> None:
    """Their classes declare no capabilities; their specs declare the personal model their client halves keep, and the
    run reads the spec (refused on ``aggregator`` before: "declares no personal_model")."""
    instance, _ = make_aggregator(name, {}, num_clients=4, model=model(), seed=0, rounds=1)
    assert run(aggregator=instance) is not None


def test_plain_fedavg_instance_unaffected() -> None:
    """No spec makes FedAvg alone (several build it): it runs under Adam, as before."""
    assert run(aggregator=FedAvg(), optimizer="adam") is not None


def test_plugin_subclass_meets_its_named_spec() -> None:
    """A subclass is not its parent's spec (exact type), but one that names a spec (BuiltBySpec) meets its check."""

    class Named(Krum):
        def built_by(self) -> tuple[str, KrumOptions]:
            return "krum", self.options

    assert refusal(aggregator=Named(KrumOptions(f=2))).field == "aggregator.options.f"


def test_every_checked_spec_makes_a_class() -> None:
    """Each built-in whose spec checks the run, limits the client optimiser or the head, or keeps a personal model names
    the class(es) it makes, and no class is made by two specs: a new method cannot leave its instances from Python
    unchecked (or refused: a personal model its class does not declare)."""
    owner: dict[type, str] = {}
    built_ins = {name: spec for name, spec in registered_algorithms().items() if spec.build.__module__.startswith("chillfl.aggregation.")}
    assert len(built_ins) > 40
    for name, spec in built_ins.items():
        default = spec.declared(spec.options())
        if spec.check is not _no_check or spec.capabilities.plain_sgd or default.plain_sgd or default.personal_model or default.linear_head:
            assert spec.makes, f"{name}: its spec declares what the run checks but names no class it makes (AlgorithmSpec.makes)"
        for cls in spec.makes:
            assert owner.setdefault(cls, name) == name, f"{cls.__name__} is made by both {owner[cls]} and {name}"


def test_qffl_instance_suggests_its_own_option() -> None:
    """q-FFL's refusal suggests setting L where the instance keeps it, not a config's ``algorithm.lipschitz``."""
    err = refusal(aggregator=Qffl(), momentum=0.9)
    assert err.field == "client.momentum" and "set aggregator.options.lipschitz" in err.message and "algorithm." not in err.message


@dataclass(frozen=True)
class RuleOptions:
    cap: int = 1


class Rule(FedAvg):
    """A plugin's rule whose registered spec names it (``makes``), as docs/extending.md says."""

    def __init__(self, options: RuleOptions = RuleOptions()) -> None:
        super().__init__()
        self.options = options


def _check_rule(options: RuleOptions, config: RunConfig, section: str) -> None:
    if options.cap > config.federation.num_clients:
        raise ConfigError(f"{section}.cap", f"must be <= federation.num_clients, got {options.cap}")


def test_plugin_spec_that_makes_its_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin's registered spec with ``makes`` holds its instances to its check (the registry seen as after
    ``register_algorithm("rule", rule)``, without changing the process's registry)."""
    rule = AlgorithmSpec(RuleOptions, lambda o, ctx: (Rule(o), []), "a plugin's rule", check=_check_rule, makes=(Rule,))
    registered_algorithms()  # the built-ins registered first, as a plugin's register_algorithm loads them
    monkeypatch.setattr(registry, "_MADE", {**registry._MADE, Rule: "rule"})  # what register_algorithm records: built_by reads it
    monkeypatch.setattr(registry._REGISTRY, "_specs", {**registry._REGISTRY._specs, "rule": rule})
    assert refusal(aggregator=Rule(RuleOptions(cap=9))).field == "aggregator.options.cap"
    assert run(aggregator=Rule(RuleOptions(cap=2))) is not None

"""A built-in aggregator passed from Python runs its own method: the local terms its downlink feeds come with it
(:class:`chillfl.aggregation.base.NeedsTerms`), not FedAvg's steps under its server rule."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.feddyn import FedDyn, FedDynOptions
from chillfl.aggregation.fedprox import FedProx, FedProxOptions
from chillfl.aggregation.moon import Moon, MoonOptions
from chillfl.aggregation.registry import make_aggregator
from chillfl.aggregation.scaffold import LinearCorrectionTerm, Scaffold
from chillfl.aggregation.vrl_sgd import VRLSGD
from chillfl.extend import Downlink, FedAvg
from chillfl.training.objective import ProximalTerm

X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0], [-1.0, 2.0], [0.5, 0.5], [1.5, 0.2], [0.3, -0.7], [-0.4, 0.9]], dtype=torch.float64)
Y = torch.tensor([0, 1, 1, 0, 1, 0, 1, 0, 1])


def model() -> nn.Module:
    """A float64 MLP with a linear head (MOON reads the representation before it)."""
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(2, 3), nn.Tanh(), nn.Linear(3, 2)).double()


def state(algorithm: dict[str, Any], **python: Any) -> dict[str, torch.Tensor]:
    """The final global state of a 3-client, 2-round float64 run: ``algorithm`` as the config's table, or ``python``'s
    aggregator (and terms) passed from Python."""
    config = {"algorithm": algorithm, "federation": {"num_clients": 3, "rounds": 2}, "client": {"lr": 0.1, "batch_size": 100, "epochs": 2},
              "eval": {"clients": "none", "client_split": "none"}}
    run = chillfl.run(model=model(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), config=config, write=False, progress=False, **python)
    return {k: v.detach().clone() for k, v in run.state.items()}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


CASES: list[tuple[dict[str, Any], Callable[[], Any]]] = [
    ({"name": "scaffold"}, lambda: Scaffold(3)),
    ({"name": "vrl_sgd"}, lambda: VRLSGD()),
    ({"name": "fedprox", "mu": 0.5}, lambda: FedProx(FedProxOptions(mu=0.5))),
    ({"name": "moon", "mu": 1.0}, lambda: Moon(MoonOptions(mu=1.0))),
    ({"name": "feddyn", "alpha": 0.5}, lambda: FedDyn(3, FedDynOptions(alpha=0.5))),
]


@pytest.mark.parametrize(("table", "make"), CASES, ids=[t["name"] for t, _ in CASES])
def test_python_instance_runs_its_configs_method(table: dict[str, Any], make: Callable[[], Any]) -> None:
    """Bitwise the config's run, and not FedAvg's (which the instance without its term ran)."""
    configured = state(table)
    python = state({"name": "fedavg"}, aggregator=make())
    assert same(python, configured)
    weighting = "uniform" if table["name"] == "scaffold" else "samples"  # SCAFFOLD's default mean is the paper's 1/|S|
    assert not same(python, state({"name": "fedavg", "weighting": weighting}))


def test_own_instance_of_the_term_is_not_doubled() -> None:
    """A caller who passes the term (the workaround before) gets it once: the same run as without it."""
    from chillfl.aggregation.base import with_needed_terms

    configured = state({"name": "scaffold"})
    assert same(state({"name": "fedavg"}, aggregator=Scaffold(3), terms=[LinearCorrectionTerm()]), configured)
    assert len(with_needed_terms(Scaffold(3), [LinearCorrectionTerm()])) == 1
    assert len(with_needed_terms(FedProx(), [ProximalTerm()])) == 1


def test_other_keys_are_another_term() -> None:
    """A term of the same class on other context keys (FedDyn's own copies) is not the needed one: both run."""
    from chillfl.aggregation.base import with_needed_terms

    terms = with_needed_terms(Scaffold(3), [LinearCorrectionTerm("feddyn_linear")])
    assert [t.reads for t in terms] == [("feddyn_linear",), ("correction",)]


def test_spec_builders_return_the_declared_terms() -> None:
    """One home: the config's builder returns what the instance declares."""
    from chillfl.aggregation.base import needed_terms

    for name, options in (("scaffold", {}), ("vrl_sgd", {}), ("fedprox", {"mu": 0.5}), ("feddyn", {}), ("fedamp", {})):
        aggregator, terms = make_aggregator(name, options, num_clients=3, model=model(), seed=0)
        assert [(type(t), getattr(t, "reads", ())) for t in terms] == [(type(t), getattr(t, "reads", ())) for t in needed_terms(aggregator)] != []


class Nudged(FedAvg):
    """A user's rule whose downlink feeds its own term, declared with ``needed_terms`` (docs/extending.md)."""

    def downlink(self, client_id: int, round: int, global_params: dict[str, torch.Tensor]) -> Downlink:
        return Downlink(context={"mu": 0.5, "global_params": global_params}, local=("global_params",))

    def needed_terms(self) -> list[ProximalTerm]:
        return [ProximalTerm()]


def test_user_rule_declares_its_terms() -> None:
    """A plugin rule's declared term runs, from Python and by import path alike."""
    python = state({"name": "fedavg"}, aggregator=Nudged())
    assert same(python, state({"name": "fedprox", "mu": 0.5}))
    _, terms = make_aggregator(f"{__name__}:Nudged", {}, num_clients=3, model=model(), seed=0)
    assert [type(t) for t in terms] == [ProximalTerm]


def test_a_subclass_of_the_term_stands_for_it() -> None:
    """``terms=[MyProx()]`` (a user's subclass of ProximalTerm on the same keys) counted as another term: the proximal
    pull was applied twice (mu/2 ||w - w^t||^2 from each)."""
    from chillfl.aggregation.base import with_needed_terms

    class MyProx(ProximalTerm):
        pass

    assert [type(t) for t in with_needed_terms(FedProx(FedProxOptions(mu=0.5)), [MyProx()])] == [MyProx]
    configured = state({"name": "fedprox", "mu": 0.5})
    assert same(state({"name": "fedavg"}, aggregator=FedProx(FedProxOptions(mu=0.5)), terms=[MyProx()]), configured)


def test_a_folder_saved_without_the_needed_terms_is_not_resumed_with_them() -> None:
    """A run saved before the needed terms were added (``Scaffold(3)`` alone ran FedAvg's steps) records no terms: its
    resume with the same instance would add SCAFFOLD's correction from the next round on, a method changed midway.
    The saved record now lists every term that runs, so the old one differs and the resume is refused in one line."""
    import dataclasses

    from chillfl.api import RUN_FROM_PYTHON, _check_same_parts
    from chillfl.errors import ConfigError
    from chillfl.experiment import Plugged, plugged_records

    plugged = Plugged(aggregator=Scaffold(3))
    record = plugged_records(plugged)["algorithm"]
    assert [t if isinstance(t, str) else t["class"] for t in record["terms"]] == ["chillfl.aggregation.scaffold.LinearCorrectionTerm"]

    saved = dataclasses.replace(chillfl.load_config(None, {}), algorithm=record)  # what a run of it saves now
    _check_same_parts(saved, None, None, plugged, RUN_FROM_PYTHON)  # as saved now: the same parts
    old = dataclasses.replace(saved, algorithm={**saved.algorithm, "terms": []})  # as the version before saved it
    with pytest.raises(ConfigError) as refused:
        _check_same_parts(old, None, None, plugged, RUN_FROM_PYTHON)
    assert refused.value.field == "aggregator" and "terms" in refused.value.message


def test_objective_refusal_names_the_instances_class() -> None:
    """``objective.proximal_mu`` beside ``aggregator=FedProx(...)`` named "algorithm 'custom'"."""
    from chillfl.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        chillfl.run(model=model(), data=chillfl.TensorData(X, Y, X, Y, num_classes=2), aggregator=FedProx(FedProxOptions(mu=1.0)),
                    config={"federation": {"num_clients": 3, "rounds": 1}, "objective": {"proximal_mu": 0.5},
                            "eval": {"clients": "none", "client_split": "none"}}, write=False, progress=False)
    assert info.value.field == "objective.proximal_mu" and info.value.message.startswith("aggregator FedProx already adds the proximal term")

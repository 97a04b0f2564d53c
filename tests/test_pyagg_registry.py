"""Which spec an aggregator passed from Python is held to (:func:`chillfl.aggregation.registry.built_by`): every class
a built-in's builder returns is in that spec's ``makes`` (FedCAC's "averaged" class was not), a class is held to the first
spec that makes it, and ``built_by()`` options of the wrong type are one ConfigError."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Iterator

import pytest
import torch
from torch import nn

from chillfl.aggregation import registry
from chillfl.aggregation.registry import AlgorithmSpec, built_by, make_aggregator, register_algorithm, registered_algorithms
from chillfl.errors import ConfigError
from chillfl.extend import FedAvg
from test_pyagg_bind import model, refusal, same, state


def variants(options: type) -> Iterator[dict[str, Any]]:
    """The defaults, then each choice of each Literal option alone (a builder may pick its class by one: FedCAC's ``local_eval``)."""
    yield {}
    hints = typing.get_type_hints(options)
    for f in dataclasses.fields(options):
        hint = hints.get(f.name)
        if typing.get_origin(hint) is typing.Literal:
            for value in typing.get_args(hint):
                if value != f.default:
                    yield {f.name: value}


def bn_model() -> nn.Module:
    """A model with batch norm and a linear head (FedBN's need)."""
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Tanh(), nn.Linear(5, 2)).double()


def test_every_class_a_builder_returns_is_held_to_its_spec() -> None:
    """Finding 3: ``local_eval = "averaged"`` built FedCACAveraged, which no spec made: an instance of it passed from
    Python was refused, and FedCAC with those options measured "trained". Every built-in that declares ``makes``, under
    each Literal choice, builds a class it declares, so an instance of it is held to that spec. (A class several specs
    build, FedOpt, is in none's ``makes``: no instance check can tell which spec it stands for.)"""
    wrong = []
    for name, spec in registered_algorithms().items():
        if not spec.makes:
            continue
        for options in variants(spec.options):
            for net in (model(), bn_model()):
                try:
                    aggregator, _ = make_aggregator(name, options, num_clients=3, model=net, seed=0, client_momentum=0.0, rounds=3,
                                                    clients_per_round=3, client_sizes=(10, 10, 10), objective_terms=())
                except ConfigError:  # a variant this model or run does not take
                    continue
                found = built_by(aggregator)
                if found is None or found[0] != name:
                    wrong.append((name, options, type(aggregator).__name__, None if found is None else found[0]))
                break
    assert wrong == []


def test_fedcac_averaged_instance_measures_averaged() -> None:
    from chillfl.aggregation.fedcac import FedCAC, FedCACAveraged, FedCACOptions

    keys = [n for n, _ in model().named_parameters()]
    assert built_by(FedCACAveraged(3, keys, FedCACOptions(local_eval="averaged")))[0] == "fedcac"  # type: ignore[index]
    with pytest.raises(ValueError, match="FedCACAveraged"):
        FedCAC(3, keys, FedCACOptions(local_eval="averaged"))
    with pytest.raises(ValueError, match="use FedCAC"):
        FedCACAveraged(3, keys, FedCACOptions())
    extra = {"eval.clients": "all", "eval.client_split": "proportional"}
    assert same(state({"name": "fedavg"}, extra, aggregator=FedCACAveraged(3, keys, FedCACOptions(local_eval="averaged"))),
                state({"name": "fedcac", "local_eval": "averaged"}, extra))


class Misnamed(FedAvg):
    """A rule whose ``built_by()`` gives its options as a dict (an easy slip)."""

    def built_by(self) -> tuple[str, Any]:
        return "krum", {"f": 0}


def test_built_by_options_of_another_type_are_one_error() -> None:
    """Finding 6: a TypeError from dataclasses.fields deep in the run's checks."""
    err = refusal(Misnamed)
    assert err.field == "aggregator" and "KrumOptions" in err.message


def test_a_class_is_held_to_the_first_spec_that_makes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding 8: a plugin spec that also makes Scaffold was silently ignored (or shadowed another, by registration order).
    bindfix #3: refusing it at registration broke the plugin's config-only use; it registers, and an instance stays
    the first spec's (deterministically, whatever the registry's name order)."""
    from chillfl.aggregation.scaffold import Scaffold, ScaffoldOptions

    registered_algorithms()  # every built-in registered
    monkeypatch.setattr(registry, "_MADE", dict(registry._MADE))
    monkeypatch.setattr(registry._REGISTRY, "_specs", dict(registry._REGISTRY._specs))
    spec = AlgorithmSpec(ScaffoldOptions, lambda o, ctx: (Scaffold(ctx.num_clients, o), []), "a second SCAFFOLD", makes=(Scaffold,))
    register_algorithm("a_second_scaffold", spec)  # sorts before "scaffold"
    assert "a_second_scaffold" in registered_algorithms()
    found = built_by(Scaffold(3))
    assert found is not None and found[0] == "scaffold"

"""Seams a plugin could reach only by a built-in's private path (found by the qaplugin helper): each is public in
``chillfl.extend``, documented, and holds for a user's module as for the built-ins."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from plugin_modules import plugin_module

import chillfl
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment

MODULE = '''
from dataclasses import dataclass

import torch

from chillfl.extend import FedAvg, Capabilities, ConstantTemperature, Stateless, own_entries, with_prefix


@dataclass(frozen=True)
class OwnHeadLater:
    """Odd clients keep a head of their own, even ones keep nothing (a stand-in for a per-client rule); measured after the average."""

    after_average: bool = True

    def prepare(self, state, start, context):
        return {**start, **own_entries(state, "mine.")}, {**context}

    def finish(self, model, state, trained):
        if trained.client_id % 2 == 0:
            return {}, {}
        return with_prefix({k: v for k, v in trained.params.items() if k.startswith("head.")}, "mine."), {}

    def personal_model(self, state, global_model):
        return {**global_model, **own_entries(state, "mine.")}


class HeadLater(FedAvg):
    capabilities = Capabilities(personal_model=True)

    def client_half(self):
        return OwnHeadLater()


class WeightedHeadLater(HeadLater):
    """HeadLater that takes weights: a base PA3Fed accepts."""

    capabilities = Capabilities(personal_model=True, takes_weights=True)


@dataclass(frozen=True)
class AfterAverageOnly(Stateless):
    after_average: bool = True


class NoPersonalModel(FedAvg):
    def client_half(self):
        return AfterAverageOnly()


@dataclass(frozen=True)
class Counter:
    """Counts its client's participations, and forgets (keeps an empty state) after every third."""

    def prepare(self, state, start, context):
        return start, dict(context)

    def finish(self, model, state, trained):
        seen = int(state["count.n"]) if "count.n" in state else 0
        n = seen + 1
        return ({} if n % 3 == 0 else {"count.n": torch.tensor(n)}), {"seen": float(seen)}


class Counting(FedAvg):
    def client_half(self):
        return Counter()

    def aggregate(self, global_params, results, round):
        self.seen = [r.report["seen"] for r in results]
        return super().aggregate(global_params, results, round)

    def round_metrics(self):
        return {"seen": self.seen[0]}


class IntKeyed(FedAvg):
    """Counts each client's rounds by client id: an int-keyed dict, which a checkpoint cannot hold."""

    def __init__(self):
        super().__init__()
        self.rounds = {}

    def aggregate(self, global_params, results, round):
        self.rounds.update({r.client_id: self.rounds.get(r.client_id, 0) + 1 for r in results})
        return super().aggregate(global_params, results, round)

    def state_dict(self):
        return {"rounds": dict(self.rounds)}

    def load_state_dict(self, state):
        self.rounds = dict(state["rounds"])


@dataclass(frozen=True)
class CountsAsInt:
    def prepare(self, state, start, context):
        return start, dict(context)

    def finish(self, model, state, trained):
        return {"count.n": 1}, {}


class IntState(FedAvg):
    def client_half(self):
        return CountsAsInt()


@dataclass(frozen=True)
class ListTemperature:
    def temperature(self, state, offered, labels):
        return offered

    def finish(self, state, temperature, local_accuracy):
        return {"t": [temperature]}


class ListPolicy(ConstantTemperature):
    def client_half(self, num_classes):
        return ListTemperature()


class TupledPolicy(ConstantTemperature):
    def state_dict(self):
        return {"seen": (1, 2)}
'''

BASE: dict[str, Any] = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "device": "cpu", "executor": "sequential",
                        "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 2}, "client": {"batch_size": 32}}


@pytest.fixture()
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with plugin_module(tmp_path, monkeypatch, "qa_seams", MODULE):
        yield tmp_path


def test_measured_after_average_is_public() -> None:
    """Built-ins' halves (FedPer's KeepLocal) declare it; a plugin had to import it from chillfl.aggregation.base."""
    from chillfl.extend import MeasuredAfterAverage, Stateless

    class Half(Stateless):
        after_average = True

    assert "MeasuredAfterAverage" in chillfl.extend.__all__
    assert isinstance(Half(), MeasuredAfterAverage)


@pytest.mark.parametrize("clients", ["sampled", "all"])
def test_a_client_whose_half_kept_no_state_is_measured_after_the_average(plugin: Path, clients: str) -> None:
    """A half measured after the average whose client keeps nothing (the even ones): the run stopped with
    ``RuntimeError: client 0's state is not on the server`` after round 1 trained (FedDBE stores a dummy zero state to
    avoid it). Its personal model is ``personal_model({}, new global model)``, here the global model itself."""
    from chillfl.runner import run_experiment

    config = load_config(None, {**BASE, "algorithm": {"name": "qa_seams:HeadLater"}, "eval": {"clients": clients},
                                "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 2}})
    records = run_experiment(config, write=False, progress=False).records
    assert len(records) == 2 and all(0.0 <= r["local_acc"] <= 1.0 for r in records)


def test_a_half_measured_after_the_average_without_a_personal_model_is_refused_when_built(plugin: Path) -> None:
    """It had no model to measure: a RuntimeError traceback once the first round had trained."""
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**BASE, "algorithm": {"name": "qa_seams:NoPersonalModel"}}))
    assert err.value.field == "algorithm.name" and "after_average" in err.value.message and "HoldsPersonalModel" in err.value.message
    from qa_seams import NoPersonalModel  # type: ignore[import-not-found]

    with pytest.raises(ConfigError) as err:
        chillfl.run(config=BASE, aggregator=NoPersonalModel(), write=False, progress=False)
    assert err.value.field == "aggregator" and "after_average" in err.value.message


def test_an_empty_state_from_finish_is_the_clients_next_state(plugin: Path) -> None:
    """``finish`` returns the client's next state: an empty one forgets. chillfl's store kept the last non-empty one
    instead (a Flower node's table is replaced), so this client counted 0, 1, 2, 2, 2."""
    from chillfl.runner import run_experiment

    config = load_config(None, {**BASE, "algorithm": {"name": "qa_seams:Counting"}, "federation": {"num_clients": 1, "rounds": 5}})
    assert [r["agg_seen"] for r in run_experiment(config, write=False, progress=False).records] == [0.0, 1.0, 2.0, 0.0, 1.0]


def test_a_plugin_half_measured_after_the_average_is_refused_on_flower_by_its_name(plugin: Path, tmp_path: Path) -> None:
    """The refusal named ``algorithm.local_eval`` (FedPer's option, which asks for it) for a plugin that has no such option."""
    pytest.importorskip("flwr")
    from chillfl.flower.apps import build_server

    with pytest.raises(ConfigError) as err:
        build_server(load_config(None, {**BASE, "out_dir": str(tmp_path), "algorithm": {"name": "qa_seams:HeadLater"}}))
    assert err.value.field == "algorithm.name" and "'qa_seams:HeadLater'" in err.value.message and "OwnHeadLater" in err.value.message
    with pytest.raises(ConfigError) as err:
        build_server(load_config(None, {**BASE, "out_dir": str(tmp_path), "algorithm": {"name": "fedper", "local_eval": "averaged"}}))
    assert err.value.field == "algorithm.local_eval"


def test_a_plugin_base_measured_after_the_average_is_refused_on_flower_by_the_base(plugin: Path, tmp_path: Path) -> None:
    """Under PA3Fed the half is the base's: the refusal named ``algorithm.name`` and 'pa3fed', which the user cannot
    change to fix it, not ``algorithm.base``."""
    pytest.importorskip("flwr")
    from chillfl.flower.apps import build_server

    config = {**BASE, "out_dir": str(tmp_path), "algorithm": {"name": "pa3fed", "base": "qa_seams:WeightedHeadLater"}}
    with pytest.raises(ConfigError) as err:
        build_server(load_config(None, config))
    assert err.value.field == "algorithm.base" and "'qa_seams:WeightedHeadLater'" in err.value.message and "OwnHeadLater" in err.value.message


@pytest.mark.parametrize("part,field,words", [
    ({"algorithm": {"name": "qa_seams:IntKeyed"}}, "algorithm.name", "state key 0 at protocol.aggregator.rounds is not a string"),
    ({"temperature": {"policy": "qa_seams:TupledPolicy"}}, "temperature.policy", "cannot checkpoint tuple at protocol.policy.seen"),
])
def test_a_state_dict_a_checkpoint_cannot_hold_is_one_error_on_its_part(plugin: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                        part: dict[str, Any], field: str, words: str) -> None:
    """It was a TypeError traceback from the checkpoint encoder (exit 1) at the first checkpoint, naming no part."""
    from chillfl.cli import main
    from chillfl.runner import run_experiment

    config = load_config(None, {**BASE, **part, "out_dir": str(tmp_path / "api"), "checkpoint": {"every": 1}, "federation": {"num_clients": 2, "rounds": 2}})
    with pytest.raises(ConfigError) as err:
        run_experiment(config, progress=False)
    assert err.value.field == field and words in err.value.message
    (tmp_path / "run.toml").write_text(
        'device = "cpu"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 2\nrounds = 2\n'
        '[checkpoint]\nevery = 1\n' + ('[algorithm]\nname = "qa_seams:IntKeyed"\n' if "algorithm" in part else '[temperature]\npolicy = "qa_seams:TupledPolicy"\n'))
    assert main(["run", "-q", str(tmp_path / "run.toml"), "--out", str(tmp_path / "cli")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"chillfl: error: {field}: ") and words in lines[0]


SOFT_LABELS = {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20}}


@pytest.mark.parametrize("executor,part,field,words", [
    ("sequential", {"algorithm": {"name": "qa_seams:IntState"}}, "algorithm.name", "CountsAsInt.finish() returned a client state whose 'count.n' is int, not a tensor"),
    ("processes", {"algorithm": {"name": "qa_seams:IntState"}}, "algorithm.name", "CountsAsInt.finish() returned a client state whose 'count.n' is int"),
    ("sequential", {"temperature": {"policy": "qa_seams:ListPolicy"}}, "temperature.policy", "ListTemperature.finish() returned a client state whose 't' is list"),
    ("sequential", {"temperature": {"policy": "qa_seams:ListPolicy"}, **SOFT_LABELS}, "temperature.policy", "ListTemperature.finish() returned"),
    ("sequential", {"temperature": {"policy": "qa_seams:ListPolicy"}, "prototypes": {"method": "fedproto"}}, "temperature.policy", "ListTemperature.finish() returned"),
])
def test_a_client_state_that_is_not_tensors_is_one_error_on_its_part(plugin: Path, executor: str, part: dict[str, Any], field: str, words: str) -> None:
    """It was ``AttributeError: 'int' object has no attribute 'detach'`` from the server's store (or a TypeError from the
    soft-label and prototype clients' states), naming no part."""
    err = pytest.raises(ConfigError, chillfl.run, config={**BASE, **part, "executor": executor}, write=False, progress=False)
    assert err.value.field == field and words in err.value.message

"""A policy or an aggregator passed from Python (``chillfl.run(policy=..., aggregator=...)``) whose T or client half
slips is refused on the field it came by (``policy``, ``aggregator``), as its other checks are; one named by import path
stays on ``temperature.policy`` / ``algorithm.name``. They were all refused on the config's field, which the caller never set."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import pytest
import torch

from plugin_modules import plugin_module
from test_qa_plugin_returns import BASE

import chillfl
from chillfl.errors import ConfigError
from chillfl.extend import ConstantTemperature, FedAvg, Stateless, Train

POLICIES = '''
import torch

from chillfl.extend import ConstantTemperature, FedAvg, Stateless


class BadT(ConstantTemperature):
    def temperature(self, client_id, round):
        return -1.0


class Half:
    def temperature(self, state, offered, labels):
        return 1.0

    def finish(self, state, temperature, local_accuracy):
        return {"t": 2.0}


class BadState(ConstantTemperature):
    def client_half(self, num_classes):
        return Half()


class Report(Stateless):
    def finish(self, model, state, trained):
        return {}, {"loss": "high"}


class BadReport(FedAvg):
    def client_half(self):
        return Report()


class TensorMetrics(FedAvg):
    def round_metrics(self):
        return {"norm": torch.tensor(1.0)}
'''


class FixedT(ConstantTemperature):
    """Gives ``value`` as T, whatever it is (the constructor's own check would refuse a bad one)."""

    def __init__(self, value: object) -> None:
        super().__init__(1.0)
        self.given = value

    def temperature(self, client_id: int, round: int) -> Any:
        return self.given


class TableHalf:
    """A client half whose state is a float, not a tensor."""

    def temperature(self, state: Mapping[str, torch.Tensor], offered: float, labels: torch.Tensor) -> float:
        return 1.0

    def finish(self, state: Mapping[str, torch.Tensor], temperature: float, local_accuracy: float | None) -> Any:
        return {"t": 2.0}


class HalfPolicy(ConstantTemperature):
    def client_half(self, num_classes: int) -> Any:
        return TableHalf()


class StrReport(Stateless):
    def finish(self, model: Any, state: Any, trained: Any) -> Any:
        return {}, {"loss": "high"}


class ReportRule(FedAvg):
    def client_half(self) -> Any:
        return StrReport()


@dataclass(frozen=True)
class ParamsNotPersonal(Stateless):
    """A personalising half whose ``train`` returns the params, not a Personal."""

    def objectives(self, spec: Any) -> Any:
        return (replace(spec, epochs=1),)

    def train(self, local: Any) -> Any:
        shared = yield Train(local.start, local.context)
        return shared.params


class TrainRule(FedAvg):
    def client_half(self) -> Any:
        return ParamsNotPersonal()


class TensorMetrics(FedAvg):
    def round_metrics(self) -> Any:
        return {"norm": torch.tensor(1.0)}


KNOWLEDGE: list[dict[str, Any]] = [{"distillation": {"method": "fedmd", "public_size": 60, "subset_size": 20}}, {"prototypes": {"method": "fedproto"}}]


@pytest.mark.parametrize("given,said", [(-1.0, "-1.0"), (math.nan, "nan"), ("0.5", "'0.5'")])
def test_a_bad_t_of_a_policy_passed_from_python_is_refused_on_policy(given: object, said: str) -> None:
    err = pytest.raises(ConfigError, chillfl.run, config=BASE, policy=FixedT(given), write=False, progress=False)
    assert err.value.field == "policy" and f"the temperature {said}; a temperature must be a finite number > 0" in err.value.message


@pytest.mark.parametrize("executor", ["sequential", "processes"])
def test_a_client_half_state_of_a_policy_passed_from_python_is_refused_on_policy(executor: str) -> None:
    err = pytest.raises(ConfigError, chillfl.run, config={**BASE, "executor": executor}, policy=HalfPolicy(), write=False, progress=False)
    assert err.value.field == "policy" and "TableHalf.finish()" in err.value.message


@pytest.mark.parametrize("part", KNOWLEDGE)
def test_the_knowledge_protocols_refuse_a_python_policy_on_policy(part: dict[str, Any]) -> None:
    """The soft-label and prototype clients' own checks: T (their training job's) and the half's state."""
    for policy, words in [(FixedT(-1.0), "the temperature -1.0;"), (HalfPolicy(), "TableHalf.finish()")]:
        err = pytest.raises(ConfigError, chillfl.run, config={**BASE, **part}, policy=policy, write=False, progress=False)
        assert err.value.field == "policy" and words in err.value.message, (part, err.value)


@pytest.mark.parametrize("rule,words", [(ReportRule, "StrReport.finish() returned a report whose 'loss' is str"),
                                        (TrainRule, "ParamsNotPersonal.train() returned dict, not a Personal")])
def test_a_client_half_of_an_aggregator_passed_from_python_is_refused_on_aggregator(rule: type[FedAvg], words: str) -> None:
    err = pytest.raises(ConfigError, chillfl.run, config=BASE, aggregator=rule(), write=False, progress=False)
    assert err.value.field == "aggregator" and words in err.value.message


def test_round_metrics_of_an_aggregator_passed_from_python_are_refused_on_aggregator() -> None:
    """The server's check of the same aggregator, which named ``algorithm.name`` too."""
    err = pytest.raises(ConfigError, chillfl.run, config=BASE, aggregator=TensorMetrics(), write=False, progress=False)
    assert err.value.field == "aggregator" and "TensorMetrics.round_metrics() returned 'norm' as Tensor" in err.value.message


def test_by_import_path_the_fields_stay_the_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with plugin_module(tmp_path, monkeypatch, "policyfield_mod", POLICIES):
        for part, field in [({"temperature": {"policy": "policyfield_mod:BadT"}}, "temperature.policy"),
                            ({"temperature": {"policy": "policyfield_mod:BadState"}}, "temperature.policy"),
                            ({"algorithm": {"name": "policyfield_mod:BadReport"}}, "algorithm.name"),
                            ({"algorithm": {"name": "policyfield_mod:TensorMetrics"}}, "algorithm.name")]:
            err = pytest.raises(ConfigError, chillfl.run, config={**BASE, **part}, write=False, progress=False)
            assert err.value.field == field, (part, err.value)

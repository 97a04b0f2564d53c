"""combine(): a personalising part's trainings run when combined with other halves; two personalising parts are refused.

Before, ``combine(Reporter(), FineTune())`` ran neither ``objectives`` nor ``train`` (the parameter-sharing client and the
privacy check looked only at the top-level half): no error, and the local accuracy was the shared model's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest
from torch import nn

import chillfl
from chillfl.aggregation.base import Trained
from chillfl.errors import ConfigError
from chillfl.extend import Capabilities, FedAvg, Local, LocalProgram, LocalSpec, Personal, Stateless, Train, combine, own_entries, with_prefix
from chillfl.privacy.build import _undeclared_trainings

PREFIX = "ft."
CALLS = {"train": 0}
CONFIG: dict[str, Any] = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
                          "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 2}, "client": {"lr": 0.1}}


@dataclass(frozen=True)
class FineTune(Stateless):
    """A personalising half: the shared training, then one more on its own objective (its personal model)."""

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        return (replace(spec, epochs=1),)

    def train(self, local: Local) -> LocalProgram:
        CALLS["train"] += 1
        shared = yield Train(local.start, local.context)
        mine = yield Train(shared.params, local.context, objective=0)
        return Personal(shared.params, shared.num_steps + mine.num_steps, shared.mean_loss, personal=mine.params, state=with_prefix(mine.params, PREFIX))

    def personal_model(self, state: Any, global_model: Any) -> Any:
        return own_entries(state, PREFIX) or dict(global_model)


@dataclass(frozen=True)
class OtherTune(FineTune):
    pass


@dataclass(frozen=True)
class Reporter(Stateless):
    def finish(self, model: nn.Module, state: Any, trained: Trained) -> tuple[Any, Any]:
        return {}, {"my_steps": float(trained.num_steps)}


class Alone(FedAvg):
    capabilities = Capabilities(takes_weights=True, personal_model=True, not_a_base="test")

    def client_half(self) -> Any:
        return FineTune()


class Combined(FedAvg):
    capabilities = Capabilities(takes_weights=True, personal_model=True, not_a_base="test", reports="steps")

    def client_half(self) -> Any:
        return combine(Reporter(), FineTune())


def test_a_combined_personalising_half_runs_its_trainings() -> None:
    """combine(Reporter(), FineTune()) runs FineTune's trainings as FineTune alone does (before: none, silently)."""
    records = {}
    for agg in (Alone(), Combined()):
        CALLS["train"] = 0
        run = chillfl.run(config=CONFIG, aggregator=agg, write=False, progress=False)
        records[type(agg).__name__] = (CALLS["train"], run.records[-1]["local_acc"], run.records[-1]["global_acc"])
    assert records["Alone"][0] == 6  # 3 clients x 2 rounds
    assert records["Combined"][0] == records["Alone"][0]
    assert records["Combined"][1:] == pytest.approx(records["Alone"][1:], abs=1e-6)


def test_two_personalising_halves_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^algorithm\.name: client halves FineTune and OtherTune both run"):
        combine(FineTune(), Reporter(), OtherTune())


def test_privacy_sees_a_combined_personalising_half() -> None:
    """A per-sample-step mechanism refuses trainings it cannot count, combined or not (before: only a top-level half)."""
    assert _undeclared_trainings(Alone()) is not None
    assert _undeclared_trainings(Combined()) is not None
    assert _undeclared_trainings(FedAvg()) is None


class Nested(FedAvg):
    capabilities = Capabilities(takes_weights=True, personal_model=True, not_a_base="test", reports="steps")

    def client_half(self) -> Any:
        return combine(combine(Reporter(), FineTune()), None)


def test_a_combined_half_combined_again_stays_flat() -> None:
    """combine() of a combination splices its parts in: a personalising part two levels down was found by nothing (the
    trainings dropped silently, PA3Fed's base check passed), and a second trainer there was not refused."""
    half = combine(combine(Reporter(), FineTune()), Reporter())
    assert [type(p).__name__ for p in half.parts] == ["Reporter", "FineTune", "Reporter"]  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="FineTune and OtherTune both run"):
        combine(combine(Reporter(), FineTune()), OtherTune())
    assert _undeclared_trainings(Nested()) is not None
    CALLS["train"] = 0
    chillfl.run(config=CONFIG, aggregator=Nested(), write=False, progress=False)
    assert CALLS["train"] == 6

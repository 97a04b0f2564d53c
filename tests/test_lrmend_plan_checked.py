"""A personalising half's ``planned_stages`` that the check before the run cannot read is one ConfigError line on the
method's field, not a traceback; and with a constant schedule the plan is not read at all (rev118b finding 4).

Why: ``check_stage_lr_floors`` indexed the half's objectives with the plan's stage index before it knew whether any
schedule runs over steps: a plugin's index past its objectives crashed every run with a raw IndexError, where the same
slip in a ``Train(objective=...)`` request is one line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pytest

import chillfl
from chillfl.errors import ConfigError
from chillfl.extend import FedAvg, LocalSpec, Personal, PlannedStage, Stateless, Train

STEPS = {"lr": 0.05, "lr_schedule": "step", "lr_schedule_over": "steps", "lr_step_size": 1, "lr_gamma": 0.5}
BASE: dict[str, Any] = {"dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "device": "cpu", "executor": "sequential",
                        "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"batch_size": 32}}


@dataclass(frozen=True)
class Planned(Stateless):
    """Two objectives (the run's, then 2 epochs of it), and the plan it is given."""

    plan: tuple[Any, ...] = ()

    def objectives(self, spec: LocalSpec) -> tuple[LocalSpec, ...]:
        return (spec, replace(spec, epochs=2))

    def planned_stages(self, spec: LocalSpec) -> tuple[PlannedStage, ...]:
        return self.plan  # type: ignore[return-value]  # what a plugin may get wrong

    def train(self, local):  # type: ignore[no-untyped-def]
        out = yield Train(local.start, local.context, objective=1)
        return Personal(out.params, out.num_steps, out.mean_loss)


class PlannedRule(FedAvg):
    def __init__(self, plan: tuple[Any, ...]) -> None:
        super().__init__()
        self.plan = plan

    def client_half(self) -> Planned:
        return Planned(self.plan)


def run(plan: tuple[Any, ...], client: dict[str, Any]) -> chillfl.Result:
    return chillfl.run(config={**BASE, "client": {**BASE["client"], **client}}, aggregator=PlannedRule(plan), write=False, progress=False)


@pytest.mark.parametrize("plan,words", [
    ((PlannedStage(2, "stage_epochs"),), "Planned.planned_stages() names objective 2, but its objectives() has 2 (indices 0 to 1)"),
    ((PlannedStage(-1, "stage_epochs"),), "names objective -1, but its objectives() has 2"),
    ((PlannedStage(1, ""),), "names option '' for objective 1: it must be the option's name"),
    ((PlannedStage(1, "stage_epochs", lr=0.0),), "gives stage 'stage_epochs' the lr 0.0: it must be a finite number > 0, or None"),
    ((PlannedStage(1, "stage_epochs", rows=0),), "gives stage 'stage_epochs' the rows 0: it must be an int >= 1, or None"),
    (([PlannedStage(1, "stage_epochs")]), "must return a tuple of PlannedStage, got list"),
], ids=["past", "negative", "option", "lr", "rows", "list"])
def test_a_plan_it_cannot_read_is_one_line_on_the_method(plan: tuple[Any, ...], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        run(plan, STEPS)
    assert err.value.field == "aggregator" and words in err.value.message, err.value.message


def test_a_constant_schedule_does_not_read_the_plan() -> None:
    assert len(run((PlannedStage(2, "stage_epochs"),), {}).records) == 1


def test_a_good_plan_runs() -> None:
    assert len(run((PlannedStage(1, "stage_epochs"),), STEPS).records) == 1

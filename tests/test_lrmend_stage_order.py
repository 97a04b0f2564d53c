"""Every executor names the same client when the updates of a round are refused at different trainings: the first job,
by client, of the first stage (a client update's first, second, ... training) at which any is refused. The processes
executor runs each client's whole update in a worker, so it raised the lowest client's error whatever its stage; the
workers now report how far their update got, and the parent raises the earliest stage's lowest job (rev118b finding 2).

Hand-worked values (tests/test_lrline_runtime_floor.py): ``lr_gamma = 1e-8``, ``lr_step_size = 1`` from lr 0.5, batches
of 2: step 6 trains at 0.5 * 1e-40 = 5e-41, below 2^-126; a training of 12 rows (6 steps) is refused at its step 6,
one of 16 rows (8 steps) at its step 6 too, one of 2 rows (1 step) is not. Client 1 takes 12 rows at its first
training, client 0 takes 16 at its second; the others 2 at each. A lockstep run meets client 1's refusal first.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from chillfl.engine.protocol import ClientJob, ClientTask
from chillfl.errors import ConfigError
from chillfl.executors.processes import ProcessExecutor
from chillfl.executors.sequential import SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.training.local import LocalOutcome, LocalSpec, model_state
from chillfl.training.schedule import LrSchedule, Optimizer

SPEC = LocalSpec(epochs=1, batch_size=2, optim=Optimizer(step_schedule=LrSchedule("step", 1, 1e-8)))
ROWS = {(1, 0): 12, (0, 1): 16}  # (client, stage): rows; 2 otherwise


class TwoStages:
    """A client side whose update trains twice, the second from the first's outcome, with the rows of :data:`ROWS`."""

    def __init__(self, model: nn.Module) -> None:
        self.start = model_state(model)

    def job(self, client: int, stage: int, start: Any) -> ClientJob:
        n = ROWS.get((client, stage), 2)
        return ClientJob(client, start, torch.zeros(n, 2), torch.zeros(n, dtype=torch.long), 0.5, 1.0, {}, 100 + client)

    def update(self, task: ClientTask[None, None]):  # type: ignore[no-untyped-def]
        first: LocalOutcome = yield self.job(task.client_id, 0, self.start)
        second: LocalOutcome = yield self.job(task.client_id, 1, first.params)
        return second.num_steps


def refusal(make: Any) -> str:
    model = nn.Linear(2, 2)
    executor = make(model, SPEC, client=TwoStages(model))
    try:
        with pytest.raises(ConfigError) as err:
            executor.map([ClientTask(c, 0, None, None) for c in range(4)])  # type: ignore[arg-type]  # data unread by this update
    finally:
        executor.close()
    assert err.value.field == "client.lr_gamma"
    return err.value.message


def test_sequential_names_the_first_stage_that_is_refused() -> None:
    line = refusal(SequentialExecutor)
    assert line.startswith("local step 6 of the 6 steps of client 1's training in round 1 (1 epochs over 12 rows in batches of 2, "), line


def test_vectorized_names_the_same() -> None:
    assert refusal(VectorizedExecutor) == refusal(SequentialExecutor)


def test_processes_names_the_same() -> None:
    assert refusal(lambda model, spec, client: ProcessExecutor(model, spec, client=client, workers=2)) == refusal(SequentialExecutor)

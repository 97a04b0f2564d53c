"""The run-time refusal of a local step below float32's smallest normal lr names the client and the round, and every
executor names the same one.

Why: a training nothing declared before the run (a plugin's stage with its own epochs) runs the step schedule over its
own, longer steps, so the refusal comes in a round's training; the user's fix (fewer epochs of that training, fewer
rounds, a gentler decay) depends on the round, which the line did not say (the built-in stages are refused before the
run: tests/test_lrline_stages.py). The vectorised executor checked its jobs in a chunk's order (by step count)
and so named another client than the sequential executor, which meets them in the round's job order.

Hand-worked values: ``lr_gamma = g``, ``lr_step_size = 1``: step k (0-based) of a training trains at lr * g^k, whatever
its length. At g = 1e-8 from lr 0.5, step 5 trains at 0.5 * 1e-40 = 5e-41, below 2^-126 = 1.18e-38 (step 4, 5e-33, is
not): a training of 6 steps or more is refused at its step 6. Client 0 takes 16 rows in batches of 2 (8 steps), client
1 takes 12 (6 steps): both are refused, and the round's order has client 0 first; a chunk's has client 1 first.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from chillfl.engine.protocol import ClientJob, ClientTask, drive_tasks
from chillfl.errors import ConfigError
from chillfl.executors.sequential import SequentialExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.training.local import LocalOutcome, LocalSpec, model_state
from chillfl.training.schedule import LrSchedule, Optimizer


STEP = Optimizer(step_schedule=LrSchedule("step", 1, 1e-8))


def jobs(model: nn.Module, round: int | None = None) -> list[ClientJob]:
    start = model_state(model)
    return [ClientJob(c, start, torch.zeros(n, 2), torch.zeros(n, dtype=torch.long), 0.5, 1.0, {}, 100 + c, round=round)
            for c, n in ((0, 16), (1, 12))]


def refusal(executor: SequentialExecutor | VectorizedExecutor, model: nn.Module) -> str:
    with pytest.raises(ConfigError) as err:
        executor.run(jobs(model, round=2))
    assert err.value.field == "client.lr_gamma"
    return err.value.message


def test_every_executor_names_the_first_client_of_the_round() -> None:
    model = nn.Linear(2, 2)
    spec = LocalSpec(epochs=1, batch_size=2, optim=STEP)
    sequential = refusal(SequentialExecutor(model, spec), model)
    assert sequential.startswith("local step 6 of the 8 steps of client 0's training in round 3 (1 epochs over 16 rows in batches of 2, "), sequential
    assert "would train at lr 0.5 * 1e-08^5 = 5e-41" in sequential
    for executor in (VectorizedExecutor(model, spec), VectorizedExecutor(model, spec, chunk_size=1)):
        assert refusal(executor, model) == sequential


class Yields:
    """A client side whose update yields its task's one training job, as the protocols' client halves do."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def update(self, task: ClientTask[None, None]):  # type: ignore[no-untyped-def]
        job = next(j for j in jobs(self.model) if j.client_id == task.client_id)
        out: LocalOutcome = yield job
        return out


def test_a_round_update_names_its_round() -> None:
    model = nn.Linear(2, 2)
    spec = LocalSpec(epochs=1, batch_size=2, optim=STEP)
    seen: list[ClientJob] = []

    def train(_spec: LocalSpec | None, batch: list[ClientJob]) -> list[LocalOutcome]:
        seen.extend(batch)
        return SequentialExecutor(model, spec).run(batch)

    tasks = [ClientTask(c, 4, None, None) for c in (0, 1)]  # type: ignore[arg-type]  # data unread by this update
    with pytest.raises(ConfigError) as err:
        drive_tasks(Yields(model), tasks, train)
    assert [j.round for j in seen] == [4, 4]
    assert "steps of client 0's training in round 5 (" in err.value.message

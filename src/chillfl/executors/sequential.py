"""The sequential executor: the reference every other executor matches.

Executors: who runs the round's client updates (the :class:`~chillfl.engine.protocol.Executor` seam).

Every executor offers the same two calls:

* ``map(tasks)``: run the client side's update (:mod:`chillfl.engine.protocol`)
  for every task, replies in task order: what the round loop calls;
* ``run(jobs)``: train :class:`ClientJob` s only (the training primitive the
  client updates' jobs end up in; also handy on its own).

Every job carries its own seed, so a result never depends on which executor
ran it or in which order jobs finished.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import nn

from chillfl.engine.predict import PredictJob, Prediction, predict_each
from chillfl.engine.protocol import ClientJob, ClientReply, ClientSide, ClientTask, Executor, drive_tasks
from chillfl.training.linear_factors import factored_linears
from chillfl.training.local import LocalOutcome, LocalSpec, check_step_floor, train_client
from chillfl.training.objective import check_reads

__all__ = ["ClientJob", "Executor", "SequentialExecutor", "check_job", "train_job"]


def trainer_of(job: ClientJob) -> str:
    """Whose training ``job`` is, as a refusal of it says: "client 3's training"."""
    return f"client {job.client_id}'s training"


def check_job(spec: LocalSpec, job: ClientJob) -> int:
    """What a job is refused for before its first step, in the order :func:`train_job` meets them: a loss term's missing
    context key, then a local step below float32's smallest normal lr (naming the client and the round); its planned steps.

    Why one function: the vectorised executor checks a stage's jobs in job order before any chunk trains (a chunk's
    order is by step count), so that it refuses the very job, with the very line, that the sequential executor does."""
    check_reads(spec.terms, job.context, job.client_id, spec.term_field)
    return check_step_floor(spec, job.lr, len(job.y), trainer=trainer_of(job), round=job.round)


def train_job(model: nn.Module, spec: LocalSpec, job: ClientJob) -> LocalOutcome:
    """One job on one (factored) template: the reference every executor matches.

    A job whose spec names its own architecture (``spec.model``, heterogeneous clients) trains that one.
    """
    spec = job.spec or spec
    check_reads(spec.terms, job.context, job.client_id, spec.term_field)
    return train_client(
        spec.model if spec.model is not None else model,
        job.start,
        job.x,
        job.y,
        spec=spec,
        lr=job.lr,
        temperature=job.temperature,
        context=job.context,
        generator=torch.Generator().manual_seed(job.seed),  # batch order on the CPU on every device: same order everywhere
        work=job.work,
        stamp=job.stamp,
        carry=job.carry,
        trainer=trainer_of(job),
        round=job.round,
    )


class SequentialExecutor:
    """Trains clients one after another in this process: the reference executor."""

    def __init__(self, model: nn.Module, spec: LocalSpec, client: ClientSide | None = None) -> None:
        self.model = factored_linears(model)  # a private template: linear weights updated from gradient factors
        self.spec = spec
        self.client = client

    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        return [train_job(self.model, self.spec, job) for job in jobs]

    def predict(self, jobs: Sequence[PredictJob]) -> list[Prediction]:
        """Client predictions one after another: the reference the batched predictor matches."""
        return predict_each(jobs)

    def map(self, tasks: Sequence[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
        assert self.client is not None, "map() needs the executor built with the protocol's client side"
        return drive_tasks(self.client, tasks, lambda _spec, jobs: self.run(jobs), self.predict)

    def close(self) -> None:
        return None

"""Executors: who runs the local training of a round's clients.

An executor receives the round's :class:`ClientJob` list (already sorted by
client id) and returns one :class:`~chillfl.training.local.LocalOutcome` per
job, in the same order. Every job carries its own seed, so the result never
depends on which executor ran it or in which order jobs finished.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import torch
from torch import nn

from chillfl.training.linear_factors import factored_linears
from chillfl.training.local import LocalOutcome, LocalSpec, train_client


@dataclass
class ClientJob:
    """Everything one client needs for one round of local training."""

    client_id: int
    start: Mapping[str, torch.Tensor]
    x: torch.Tensor
    y: torch.Tensor
    lr: float
    temperature: float
    context: Mapping[str, Any]
    seed: int


class Executor(Protocol):
    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        ...

    def close(self) -> None:
        ...


class SequentialExecutor:
    """Trains clients one after another in this process: the reference executor."""

    def __init__(self, model: nn.Module, spec: LocalSpec) -> None:
        self.model = factored_linears(model)  # a private template: linear weights updated from gradient factors
        self.spec = spec

    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        return [
            train_client(
                self.model,
                job.start,
                job.x,
                job.y,
                spec=self.spec,
                lr=job.lr,
                temperature=job.temperature,
                context=job.context,
                generator=torch.Generator().manual_seed(job.seed),
            )
            for job in jobs
        ]

    def close(self) -> None:
        return None

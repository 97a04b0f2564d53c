"""Per-round work depends on the sampled clients only, never on how many are registered.

No wall-clock assertion: the test counts what a round touches (clients' data
reads, executor jobs) and checks that the round records do not grow with the
number of registered clients.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.config import load_config
from chillfl.data.datasets import ArrayDataset
from chillfl.data.federated import FederatedData
from chillfl.runner import rounds_for
from chillfl.experiment import build_experiment


class CountingData(FederatedData):
    """FederatedData that counts per-client reads."""

    reads: list[int]

    def client_train(self, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads.append(cid)
        return super().client_train(cid)

    def client_eval(self, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads.append(cid)
        return super().client_eval(cid)


def _rounds(num_clients: int, executor: str) -> tuple[list[int], list[dict[str, Any]]]:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2 * num_clients, 8, generator=g), torch.randint(0, 3, (2 * num_clients,), generator=g)
    dataset = ArrayDataset("toy", x, y, x[:30], y[:30], 3)
    data = CountingData(
        dataset=dataset,
        train_indices=[np.arange(2 * c, 2 * c + 2, dtype=np.int64) for c in range(num_clients)],
        eval_indices=[np.zeros(0, dtype=np.int64) for _ in range(num_clients)],
        noise=None,
        public_indices=np.zeros(0, dtype=np.int64),
        seed=0,
    )
    data.reads = []
    overrides = {
        "executor": executor,
        "model": {"name": "mlp", "hidden": [4]},
        "federation.num_clients": num_clients,
        "federation.clients_per_round": 10,
        "federation.rounds": 3,
        "client.batch_size": 2,
        "eval.clients": "none",
        "eval.client_split": "none",
    }
    exp = build_experiment(load_config(None, overrides), data=data)
    data.reads = []  # count the rounds only, not the set-up
    records = list(rounds_for(exp)(exp))
    return data.reads, records


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_ten_thousand_registered_clients_cost_a_round_what_a_hundred_do(executor: str) -> None:
    small_reads, small = _rounds(100, executor)
    large_reads, large = _rounds(10_000, executor)
    assert len(small_reads) == len(large_reads) == 3 * 10  # 10 sampled clients a round, read once each
    assert max(large_reads) >= 100  # the sample really ranges over all 10,000
    for a, b in zip(small, large):
        assert len(b["clients"]) == 10
        assert sorted(a) == sorted(b)  # the same fields
        # nothing in a record grows with the registered count (client ids may have more digits)
        assert len(json.dumps(b)) <= len(json.dumps(a)) + 10 * 4 * 2

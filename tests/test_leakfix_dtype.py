"""A method that builds its own modules or noise (FedGen's generator, FedCP's CPN) builds them in a dtype of its own,
not the process's default: a notebook that left ``torch.set_default_dtype(torch.float64)`` set by an earlier cell gets
the same run on its float32 model as a fresh process (FedGen crashed in round 1, FedCP drew another start)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import torch

import chillfl
from test_pyagg_bind import Net  # a float32 MLP with a linear head (float64 where the test asks)

torch.manual_seed(0)
X = torch.randn(30, 4)
Y = (X[:, 0] + 0.3 * X[:, 1] > 0).long()


def outcome(name: str, default: torch.dtype, double: bool = False) -> tuple[list[Any], dict[str, torch.Tensor]]:
    """The records and final global state of a 3-client, 2-round run of ``name`` under the default dtype ``default``
    (the model and data built before it is set, as an earlier cell would)."""
    torch.manual_seed(1)
    net = Net().double() if double else Net()
    data = chillfl.TensorData(X.double(), Y, X.double(), Y, num_classes=2) if double else chillfl.TensorData(X, Y, X, Y, num_classes=2)
    config = {"algorithm": {"name": name}, "federation": {"num_clients": 3, "rounds": 2},
              "client": {"lr": 0.1, "batch_size": 4, "epochs": 1}, "eval": {"clients": "none", "client_split": "none"}, "seed": 3}
    before = torch.get_default_dtype()
    logging.disable(logging.WARNING)
    torch.set_default_dtype(default)
    try:
        run = chillfl.run(model=net, data=data, config=config, write=False, progress=False)
    finally:
        torch.set_default_dtype(before)
        logging.disable(logging.NOTSET)
    records = [{k: v for k, v in r.items() if "time" not in k} for r in run.records]
    return records, {k: v.clone() for k, v in run.state.items()}


@pytest.mark.parametrize("name", ["fedgen", "fedcp"])
def test_a_float32_model_runs_alike_under_a_float64_default_dtype(name: str) -> None:
    records, state = outcome(name, torch.float32)
    records64, state64 = outcome(name, torch.float64)
    assert records64 == records
    assert state64.keys() == state.keys()
    assert all(torch.equal(state64[k], state[k]) and state64[k].dtype == state[k].dtype for k in state)


@pytest.mark.parametrize("name", ["fedgen", "fedcp"])
def test_a_float64_model_runs_alike_under_either_default_dtype(name: str) -> None:
    records, state = outcome(name, torch.float32, double=True)
    records64, state64 = outcome(name, torch.float64, double=True)
    assert records64 == records
    assert all(torch.equal(state64[k], state[k]) for k in state)

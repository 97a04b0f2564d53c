"""``batched_conv = "auto"`` picks ``nhwc`` only where the steps are recorded as CUDA graphs, by the executor's own rule.

No GPU needed: a ``torch.device("cuda")`` object creates no CUDA context, and the executor's
:meth:`~chillfl.executors.vectorized.VectorizedExecutor.graphed` and the resolver only read its type.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from chillfl.config import load_config
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.training.batched_conv import replayable_steps, resolve_batched_conv
from chillfl.training.local import LocalSpec

CUDA = torch.device("cuda")
DP_SGD = object()
"""A stand-in for DP-SGD's per-sample step (``LocalSpec.private``): only whether there is one is read here."""

CLIENTS: dict[str, dict[str, Any]] = {
    "sgd": {},
    "sgd-nesterov": {"client.momentum": 0.9, "client.nesterov": True},
    "sgd-cosine-over-rounds": {"client.lr_schedule": "cosine"},  # the server's rate, one number a round: replayable
    "sgd-cosine-over-steps": {"client.lr_schedule": "cosine", "client.lr_schedule_over": "steps"},
    "sgd-step-over-steps": {"client.lr_schedule": "step", "client.lr_schedule_over": "steps"},
    "adam": {"client.optimizer": "adam"},
    "adamw": {"client.optimizer": "adamw"},
}
REPLAYABLE = {"sgd", "sgd-nesterov", "sgd-cosine-over-rounds"}


def _optim(case: str) -> Any:
    return load_config(None, {"executor": "vectorized", "cuda_graphs": True, **CLIENTS[case]}).client.optim()


@pytest.mark.parametrize("private", [None, DP_SGD], ids=["plain", "dp-sgd"])
@pytest.mark.parametrize("case", list(CLIENTS))
@pytest.mark.parametrize("precision", ["bf16", "tf32"])
def test_auto_is_nhwc_exactly_where_the_executor_records_graphs(case: str, private: object, precision: str) -> None:
    """Adam, a schedule over local steps or DP-SGD run eagerly under ``cuda_graphs = true``: ``auto`` keeps ``grouped``
    there (eager ``nhwc`` was slower, and refuses second-order gradients)."""
    optim = _optim(case)
    graphed = case in REPLAYABLE and private is None
    assert replayable_steps(optim, private) is graphed
    picked = resolve_batched_conv("auto", precision, CUDA, True, optim=optim, private=private)
    assert picked == ("nhwc" if graphed else "grouped")
    spec = LocalSpec(epochs=1, batch_size=8, optim=optim, private=private, cuda_graphs=True)
    assert VectorizedExecutor(nn.Linear(3, 2), spec).graphed(CUDA) is graphed  # the executor asks the same rule


@pytest.mark.parametrize("case", list(CLIENTS))
def test_auto_is_grouped_without_graphs_in_fp32_and_off_cuda(case: str) -> None:
    optim = _optim(case)
    assert resolve_batched_conv("auto", "bf16", CUDA, False, optim=optim, private=None) == "grouped"
    assert resolve_batched_conv("auto", "fp32", CUDA, True, optim=optim, private=None) == "grouped"
    assert resolve_batched_conv("auto", "bf16", torch.device("cpu"), True, optim=optim, private=None) == "grouped"
    for chosen in ("grouped", "gemm", "nhwc", "loop"):  # a choice of the config's own is kept whatever the steps
        assert resolve_batched_conv(chosen, "bf16", CUDA, True, optim=optim, private=DP_SGD) == chosen

"""A run records which executor trained its clients.

Before: with ``executor = "auto"`` nothing in the run folder said which executor ran (config.toml keeps "auto",
summary.json's environment had cores and threads only; the choice was an info log line hidden by -q), and a rerun on
other cores, which can choose another (other bits, docs/reproducibility.md), looked the same; nor was a fallback taken
at run time (a model vmap refuses) recorded.
"""

from __future__ import annotations

import json
from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path

import pytest
import torch
from torch import nn

import chillfl
from chillfl.executors.parallel import vectorized_workers
from chillfl.executors.processes import default_workers

TINY = {
    "dataset": {"name": "digits"},
    "partition": {"name": "dirichlet", "alpha": 0.3},
    "federation": {"num_clients": 3, "rounds": 1},
    "model": {"name": "mlp"},
    "device": "cpu",
}


def test_an_auto_run_records_the_executor_it_chose_and_keeps_auto_in_its_config(tmp_path: Path) -> None:
    result = chillfl.run(config={**TINY, "executor": "auto"}, out_dir=str(tmp_path), progress=False)
    assert result.folder is not None
    env = json.loads((result.folder / "summary.json").read_text())["environment"]
    workers = vectorized_workers(1, default_workers())
    assert env["executor"] == "vectorized"  # 3 clients a round, a small MLP: vectorised on any number of cores
    assert env["executor_workers"] == workers
    assert env["executor_fallback"] == ("processes" if workers > 1 else "sequential")
    assert "executor_fallback_from" not in env
    saved = tomllib.loads((result.folder / "config.toml").read_text())
    assert saved["executor"] == "auto"  # a rerun or a resume chooses again


def test_a_named_executor_is_recorded_too() -> None:
    result = chillfl.run(config={**TINY, "executor": "sequential"}, write=False, progress=False)
    env = result.summary["environment"]
    assert (env["executor"], env["executor_workers"]) == ("sequential", 1) and "executor_fallback" not in env


@pytest.mark.usefixtures("no_strict_fallbacks")  # a fallback on purpose
def test_a_fallback_taken_at_run_time_is_what_is_recorded() -> None:
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(90, 12, generator=gen), torch.randint(0, 5, (90,), generator=gen)
    data = chillfl.TensorData(x[:60], y[:60], x[60:], y[60:], num_classes=5)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 8), nn.Dropout(0.5), nn.Linear(8, 5))  # a random op: vmap refuses the step
    result = chillfl.run(model=model, data=data, config={"federation": {"num_clients": 3, "rounds": 1}, "executor": "vectorized", "device": "cpu"},
                         write=False, progress=False)
    env = result.summary["environment"]
    assert env["executor"] == "sequential" and env["executor_workers"] == 1  # what trained the clients
    assert env["executor_fallback_from"] == "vectorized" and env["executor_fallback_reason"]

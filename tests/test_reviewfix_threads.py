"""A comparison's runs under ``executor = "processes"`` with ``threads = 2`` borrow the sweep's pool of 2-thread workers:
every run failed ("an executor on a given pool has the pool's workers and threads_per_worker"), while a single run
(its own pool) worked."""

from __future__ import annotations

from pathlib import Path

import chillfl

CONFIG = {
    "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]},
    "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 1},
    "client": {"epochs": 1, "batch_size": 32}, "eval": {"client_split_size": 10},
    "executor": "processes", "threads": 2, "name": "pt",
}


def test_a_comparison_under_processes_with_two_threads_runs(tmp_path: Path) -> None:
    result = chillfl.compare(config=CONFIG, grid={"client.lr": [0.05, 0.1]}, out_dir=tmp_path, progress=False)
    assert result.complete and result.runs == 2 and not result.failures, result.failures
    assert len(result.outputs) == 2

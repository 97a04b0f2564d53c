"""summary.json's ``stability`` does not depend on the order a record lists its clients (report-longrun finding 2).

A run's records in memory list a table's clients in id order (``2, 10``); read back from metrics.jsonl, whose keys are
sorted as text, in text order (``"10", "2"``). The means over clients were taken in first-seen order, so a resumed run
(its first rounds read back) wrote a ``stability`` that differed in the last bits from the uninterrupted run's, as did
``python -m chillfl.metrics.stability`` on a finished folder. Clients are now taken in id order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.config import load_config
from chillfl.metrics.stability import client_trajectories, mean_inside_vs_outside_std, stability_summary
from chillfl.runner import resume_experiment, run_experiment
from chillfl.sinks import CLIENTS_CSV_FILE, CSV_FILE
from procs import InterruptAt


def records(seed: int, clients: int = 14, rounds: int = 12, per_round: int = 5) -> list[dict[str, Any]]:
    """Per-client losses of a partial-participation run, in memory (id order), with PA3Fed's CLP flags."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for rnd in range(1, rounds + 1):
        drawn = sorted(rng.sample(range(clients), per_round))
        out.append({"round": rnd, "clients": drawn, "agg_clp": rnd % 3 == 0, "client_train_loss": {str(c): rng.uniform(0.1, 3.0) for c in drawn}})
    return out


def read_back(records_: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as metrics.jsonl gives them back (``sort_keys``)."""
    return [json.loads(json.dumps(r, sort_keys=True)) for r in records_]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_summary_of_records_in_memory_equals_theirs_read_back(seed: int) -> None:
    """Bitwise: the same losses averaged in the same order (seeds 0-2 each differed in the last bits before)."""
    memory, disk = records(seed), read_back(records(seed))
    assert list(disk[0]["client_train_loss"]) != list(memory[0]["client_train_loss"])  # the two orders of the finding
    assert stability_summary(memory) == stability_summary(disk)
    assert list(client_trajectories(disk)) == sorted(client_trajectories(disk))


def test_fig5s_means_take_clients_in_id_order() -> None:
    """A mapping listing its clients in any order gives the same inside / outside means (these differed before)."""
    rng = random.Random(0)
    losses = {cid: {r: rng.uniform(0.1, 3.0) for r in range(1, 9)} for cid in range(12)}
    flags = {r: r % 2 == 0 for r in range(1, 9)}
    shuffled = dict(sorted(losses.items(), key=lambda item: str(item[0])))
    assert mean_inside_vs_outside_std(shuffled, flags) == mean_inside_vs_outside_std(losses, flags)


@pytest.fixture
def no_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)


def test_a_resumed_runs_summary_and_csv_files_equal_the_uninterrupted_runs(tmp_path: Path, no_figures: None) -> None:
    """24 clients, 6 a round, stopped at round 6 and resumed from round 4's checkpoint (its first 4 rounds read back):
    summary.json but its wall time, metrics.jsonl and the CSV sink's two files are the uninterrupted run's, bit for bit
    (this seed's ``stability`` differed before, on the machine that wrote the test)."""

    def config(out: Path) -> Any:
        return load_config(None, {
            "name": "r", "seed": 1, "out_dir": str(out), "dataset": {"name": "digits"}, "partition": {"name": "dirichlet", "alpha": 0.5},
            "model": {"name": "mlp", "hidden": [8]}, "federation": {"num_clients": 24, "clients_per_round": 6, "rounds": 8},
            "client": {"epochs": 1, "batch_size": 32, "lr": 0.05}, "checkpoint": {"every": 4}, "log": {"sinks": ["csv"]}, "eval": {"every": 8}})

    whole = run_experiment(config(tmp_path / "whole"), progress=False)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config(tmp_path / "resumed"), progress=False, callbacks=[InterruptAt(6)])
    resumed = resume_experiment(tmp_path / "resumed" / "r.partial", progress=False)
    assert whole.folder is not None and resumed.folder is not None
    summaries = [json.loads((out / "summary.json").read_text()) for out in (whole.folder, resumed.folder)]
    for summary in summaries:
        summary.pop("wall_time_s")
    assert summaries[0]["stability"]["clients"] > 10
    assert summaries[1] == summaries[0]
    for name in ("metrics.jsonl", CSV_FILE, CLIENTS_CSV_FILE):
        assert (resumed.folder / name).read_bytes() == (whole.folder / name).read_bytes(), name

"""summary.json's stability and ``metrics_clients.csv`` list clients in one order (one ``client_order``)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from chillfl import sinks
from chillfl.metrics import records, stability
from chillfl.metrics.stability import client_trajectories, mean_inside_vs_outside_std
from chillfl.sinks import CsvSink


def test_one_client_order_for_the_csv_and_the_stability_summary() -> None:
    """sinks sorted by its own ``client_order`` and stability by ``sorted(int(cid))``: one key now, in metrics.records."""
    assert sinks.client_order is records.client_order and stability.client_order is records.client_order


@pytest.mark.parametrize("ids", [[2, 10, 1], ["10", "2", "1"]], ids=["in-memory", "read-back"])
def test_the_csv_and_the_trajectories_list_ids_2_10_1_alike(tmp_path: Path, ids: list[object]) -> None:
    """Integer ids, as a run holds them (``2, 10, 1``) or as ``metrics.jsonl`` reads them back (sorted text, ``"10"``
    before ``"2"``): both outputs list clients 1, 2, 10, as before the two orders were one."""
    rounds = [{"round": r, "client_train_loss": {cid: 1.0 / (r + i) for i, cid in enumerate(ids)}} for r in (1, 2, 3)]
    CsvSink(tmp_path / "m.csv", records=rounds)
    lines = list(csv.reader((tmp_path / "m_clients.csv").open(newline="")))[1:]
    assert [client for rnd, _, client, _ in lines if rnd == "1"] == ["1", "2", "10"]
    assert list(client_trajectories(rounds)) == [1, 2, 10]


def test_the_fig5_means_take_clients_in_the_same_order() -> None:
    """Fig. 5's mean over clients is the same whatever order the mapping lists its clients (a float sum depends on it)."""
    losses = {2: {1: 0.1, 2: 0.7, 3: 0.3}, 10: {1: 1e-9, 2: 0.5, 3: 3.0}, 1: {1: 0.2, 2: 0.25, 3: 0.9}}
    clp = {1: True, 2: True, 3: False}
    reordered = {cid: losses[cid] for cid in (10, 1, 2)}
    assert mean_inside_vs_outside_std(losses, clp, min_values=1) == mean_inside_vs_outside_std(reordered, clp, min_values=1)

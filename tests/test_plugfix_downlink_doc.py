"""docs/extending.md's reference documents ``Downlink`` (its every field) with a clustered example that runs: each
client starts from its cluster's model (``Downlink(params=...)``), keys it leaves out come from the global model."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from chillfl.aggregation.base import ClientResult, Downlink
from chillfl.config import load_config
from chillfl.runner import run_experiment
from test_extending_reference import reference_bullet
from test_plugins import BASE


def test_the_reference_names_every_field_of_downlink() -> None:
    bullet = reference_bullet("Downlink")
    assert [f.name for f in dataclasses.fields(Downlink) if f"`{f.name}`" not in bullet] == []
    assert "Keys absent from it come from the global model" in bullet


def result(client_id: int, value: float) -> ClientResult:
    return ClientResult(client_id, {"w": torch.full((2,), value)}, num_samples=1, num_steps=1, lr=0.1, temperature=1.0, train_loss=0.0)


def test_the_clustered_example_sends_each_client_its_clusters_model(my_methods: Any) -> None:
    rule = my_methods.TwoClusters()
    start = {"w": torch.zeros(2)}
    assert rule.downlink(1, 0, start).params is None  # no cluster model yet: the global one
    new = rule.aggregate(start, [result(0, 1.0), result(1, 3.0), result(3, 5.0)], 0)
    assert torch.equal(new["w"], torch.full((2,), 3.0))  # the global model: every upload's mean
    assert torch.equal(rule.downlink(1, 1, new).params["w"], torch.full((2,), 4.0))  # cluster 1: clients 1 and 3
    assert torch.equal(rule.downlink(2, 1, new).params["w"], torch.full((2,), 1.0))  # cluster 0: client 0
    again = my_methods.TwoClusters()
    again.load_state_dict(rule.state_dict())
    assert torch.equal(again.downlink(3, 1, new).params["w"], rule.downlink(3, 1, new).params["w"])


def test_the_clustered_example_runs_named_by_path(my_methods: Any) -> None:
    records = run_experiment(load_config(None, {**BASE, "federation.rounds": 2, "algorithm": {"name": "my_methods:TwoClusters"}}),
                             write=False, progress=False).records
    assert len(records) == 2 and 0 <= records[-1]["global_acc"] <= 1

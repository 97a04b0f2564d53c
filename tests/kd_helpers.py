"""Shared by the FedProto / FedHKD / FedMD / heterogeneous-model tests: a tiny run under every executor."""

from __future__ import annotations

import math
from typing import Any

import pytest

from chillfl.config import load_config
from chillfl.runner import run_experiment

BASE: dict[str, Any] = {
    "seed": 3,
    "dataset.name": "digits",
    "partition.name": "dirichlet",
    "partition.alpha": 0.5,
    "federation.num_clients": 6,
    "federation.clients_per_round": 3,
    "federation.rounds": 2,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.clients": "sampled",
    "eval.client_split_size": 20,
}

MIXED = {"name": "mlp", "hidden": [256], "groups": [{"clients": "0-2", "name": "flexchill_cnn"}, {"clients": [4], "name": "mlp", "hidden": [32, 256]}]}
"""Three architectures with one representation width (256): a CNN, a one- and a two-hidden-layer MLP."""


def records(overrides: dict[str, Any], executor: str = "sequential") -> list[dict[str, Any]]:
    cfg = load_config(None, {**BASE, "executor": executor})
    cfg = cfg.with_overrides(overrides)
    return run_experiment(cfg, write=False, progress=False).records


def floats(recs: list[dict[str, Any]]) -> list[tuple[str, int, float]]:
    return [(k, r["round"], v) for r in recs for k, v in sorted(r.items()) if isinstance(v, float) and not math.isnan(v)]


def check_every_executor(overrides: dict[str, Any]) -> list[dict[str, Any]]:
    """Sequential and processes bitwise equal; vectorized within float tolerance; returns the sequential records."""
    seq = records(overrides)
    assert seq == records(overrides, "processes")
    vec = records(overrides, "vectorized")
    assert [r["clients"] for r in seq] == [r["clients"] for r in vec]
    assert [r["bytes_cumulative"] for r in seq] == [r["bytes_cumulative"] for r in vec]
    a, b = floats(seq), floats(vec)
    assert [x[:2] for x in a] == [x[:2] for x in b]
    for (key, rnd, x), (_, _, y) in zip(a, b):
        assert y == pytest.approx(x, rel=2e-3, abs=2e-3), (key, rnd)
    return seq

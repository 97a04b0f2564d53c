"""Shared by the FedProto / FedHKD / FedMD / heterogeneous-model tests: a tiny run under every executor."""

from __future__ import annotations

from typing import Any

from chillfl.config import load_config
from chillfl.runner import run_experiment

from float_paths import REL, lockstep
from lent_pools import pools

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
    return run_experiment(cfg, write=False, progress=False, pools=pools()).records  # a process pool's workers lent (lent_pools)


def check_every_executor(overrides: dict[str, Any], rel: float = REL) -> list[dict[str, Any]]:
    """Sequential and processes bitwise equal; vectorized in lockstep within float rounding; returns the sequential records.

    Lockstep (:func:`float_paths.lockstep`), not two whole trajectories: FedMD's digest (L1 on logits) turns a
    rounding difference into a different sign of the gradient, and after a round of it two float paths differ by
    3e-3 of the loss and 6 % of accuracy (measured on AVX2 kernels), with nothing wrong in either.
    ``rel``: the tolerance (:data:`float_paths.FEDMD_REL` for FedMD).
    """
    seq = records(overrides)
    assert seq == records(overrides, "processes")
    vec = lockstep(load_config(None, BASE).with_overrides(overrides), rel)
    assert [r["clients"] for r in seq] == [r["clients"] for r in vec]
    assert [r["bytes_cumulative"] for r in seq] == [r["bytes_cumulative"] for r in vec]
    assert [sorted(r) for r in seq] == [sorted(r) for r in vec]
    return seq

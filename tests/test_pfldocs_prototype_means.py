"""Prototype methods average their clients as ``local_acc`` does: a diverged client's NaN shows, an empty split does not count."""

from __future__ import annotations

import math

import torch

from chillfl.config import load_config
from chillfl.engine.loop import run_rounds
from chillfl.executors.sequential import SequentialExecutor
from chillfl.experiment import build_experiment, build_protocol

CFG = {"seed": 5, "dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 1,
       "client.epochs": 1, "client.batch_size": 32, "client.lr": 0.05, "eval.client_split_size": 20}


def _protocol(eval_clients: str = "sampled"):
    cfg = load_config(None, {**CFG, "eval.clients": eval_clients}).with_overrides({"model": {"name": "mlp"}, "prototypes": {"method": "fedproto"}})
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    list(run_rounds(protocol, SequentialExecutor(exp.model, exp.spec, protocol.client), seed=5, num_clients=4, clients_per_round=2, rounds=1, start=0))
    return protocol


def test_a_diverged_client_model_makes_global_acc_and_loss_nan():
    protocol = _protocol()
    assert protocol.state is None and len(protocol.clients) == 2  # FedProto keeps the clients' own models: global_acc is their mean
    fine = protocol._global_metrics()
    assert 0.0 <= fine["global_acc"] <= 1.0 and math.isfinite(fine["global_loss"])
    cid = sorted(protocol.clients)[0]
    protocol.clients[cid] = {k: torch.full_like(v, math.nan) if v.is_floating_point() else v for k, v in protocol.clients[cid].items()}
    out = protocol._global_metrics()
    assert math.isnan(out["global_acc"]) and math.isnan(out["global_loss"])


def test_local_proto_acc_keeps_a_nan_and_leaves_out_only_empty_splits():
    protocol = _protocol("all")
    protocol.proto_acc = {0: 0.5, 1: 0.7, 2: math.nan}
    assert math.isnan(protocol.local_proto_acc([0, 1]))  # "all": every client measured so far, the NaN one too
    protocol.evaluation.empty_eval = frozenset({2})  # client 2's own split is empty: its NaN measured nothing
    assert math.isclose(protocol.local_proto_acc([0, 1]), 0.6)
    protocol.eval_clients = "sampled"
    protocol.evaluation.empty_eval = frozenset()
    protocol.proto_acc[1] = math.nan
    assert math.isnan(protocol.local_proto_acc([0, 1])) and protocol.local_proto_acc([0]) == 0.5

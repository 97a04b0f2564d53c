"""Local accuracy over the clients that measured something: an empty split is left out (and counted out of
``local_clients``), a non-finite model is not (its NaN makes the mean NaN, and the health check says so)."""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest
import torch
from torch import nn

from chillfl.config import load_config
from chillfl.engine.health import LossWatch
from chillfl.errors import Diverged
from chillfl.experiment import build_data, build_experiment, run_notes
from chillfl.protocols import common
from chillfl.protocols.common import Evaluation, LocalLog
from chillfl.runner import rounds_for
from chillfl.training.local import evaluate


def test_an_empty_split_is_left_out_and_not_counted() -> None:
    log = LocalLog(empty=frozenset({2}))
    for cid, acc in ((0, 0.5), (1, 0.7), (2, math.nan)):
        log.record(cid, acc, 1.0, None)
    out = log.metrics([0, 1, 2], "sampled", per_client=True)
    assert out["local_clients"] == 2
    assert out["local_acc"] == pytest.approx(0.6)
    assert out["local_accs"] == {"0": 0.5, "1": 0.7}
    assert log.metrics([], "all")["local_clients"] == 2  # "all": every client measured so far, the empty one left out


def test_a_non_finite_model_makes_local_acc_nan() -> None:
    """evaluate() gives NaN for non-finite logits; that client must not vanish from the mean as an empty split would."""
    model = nn.Linear(2, 3)
    state = {k: torch.full_like(v, math.nan) for k, v in model.state_dict().items()}
    acc, loss = evaluate(model, state, torch.zeros(4, 2), torch.zeros(4, dtype=torch.long))
    assert math.isnan(acc) and math.isnan(loss)
    log = LocalLog()
    log.record(0, 0.8, 0.5, 0.8)
    log.record(1, acc, loss, acc)
    out = log.metrics([0, 1], "sampled")
    assert out["local_clients"] == 2
    assert math.isnan(out["local_acc"]) and math.isnan(out["local_loss"]) and math.isnan(out["local_val_acc"])


def test_a_nan_local_loss_is_reported_like_a_nan_global_loss(caplog: pytest.LogCaptureFixture) -> None:
    record = {"round": 1, "train_loss": 1.0, "local_loss": math.nan, "local_acc": math.nan}
    with caplog.at_level(logging.WARNING):
        LossWatch(strict=False).observe(record)
    assert "local loss nan" in caplog.text and "not finite" in caplog.text
    with pytest.raises(Diverged):
        LossWatch(strict=True).observe(record)


BASE = {
    "seed": 1, "dataset.name": "digits", "partition.name": "flexchill_dirichlet", "federation.num_clients": 12,
    "federation.clients_per_round": 12, "federation.rounds": 1, "client.epochs": 1, "client.batch_size": 32,
    "eval.client_split": "partition", "eval.validation": 0.95, "eval.client_split_size": 60, "log.per_client": True,
}


@pytest.mark.parametrize("clients", ["sampled", "all"])
def test_a_run_with_empty_splits_counts_only_the_measured_clients(clients: str) -> None:
    cfg = load_config(None, {**BASE, "eval.clients": clients})
    data = build_data(cfg)
    empty = {c for c, n in enumerate(data.eval_sizes()) if n == 0}
    assert empty and len(empty) < data.num_clients  # the finding's split: some clients' test rows all went to validation
    exp = build_experiment(cfg, data=data)
    note = common.empty_splits_note(cfg, data)
    assert note is not None and f"{len(empty)} of the 12 clients have an empty local evaluation split" in note
    assert note in run_notes(cfg, exp)
    (record,) = list(rounds_for(exp)(exp))
    assert record["local_clients"] == data.num_clients - len(empty)
    assert set(record["local_accs"]) == {str(c) for c in range(data.num_clients) if c not in empty}
    assert record["local_acc"] == pytest.approx(float(np.mean(list(record["local_accs"].values()))))
    if clients == "all":
        ev = Evaluation(cfg, data, exp.model, torch.device("cpu"))
        assert ev.empty_eval == frozenset(empty)
        assert math.isfinite(record["global_client_acc"])


def test_global_client_acc_keeps_a_non_finite_global_model_nan() -> None:
    cfg = load_config(None, {**BASE, "eval.clients": "all", "eval.validation": 0.0})
    data = build_data(cfg)
    exp = build_experiment(cfg, data=data)
    ev = Evaluation(cfg, data, exp.model, torch.device("cpu"))
    broken = {k: torch.full_like(v, math.nan) if v.is_floating_point() else v for k, v in exp.model.state_dict().items()}
    assert math.isnan(ev.metrics(broken)["global_client_acc"])


def test_no_note_without_empty_splits() -> None:
    cfg = load_config(None, {**BASE, "eval.client_split": "proportional", "eval.validation": 0.0})
    assert common.empty_splits_note(cfg, build_data(cfg)) is None

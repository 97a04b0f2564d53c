"""What a plugin needed a private import or a guess for, now in ``chillfl.extend``: the attackers' labels rewritten the
built-in ``label_flip``'s way (``relabel_rows``), and the loss and accuracy of a state on a client's rows that IFCA's
choice and q-FFL's report read (``evaluate``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import chillfl
import chillfl.extend
from chillfl.errors import ConfigError

CONFIG: dict[str, Any] = {"seed": 0, "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [8]}, "device": "cpu", "executor": "sequential",
                          "partition": {"name": "iid"}, "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1},
                          "client": {"batch_size": 64, "lr": 0.1}, "eval": {"clients": "none"}}


def data(rows: list[list[int]]) -> Any:
    """Five rows labelled 0..4, split into ``rows`` by client."""
    from chillfl.data import ArrayDataset, FederatedData

    ds = ArrayDataset("t", torch.zeros(5, 2), torch.arange(5), torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), 5)
    return FederatedData(ds, [np.array(r, dtype=np.int64) for r in rows], [np.zeros(0, dtype=np.int64)] * len(rows), None, np.zeros(0, dtype=np.int64))


def test_relabel_rows_rewrites_the_attackers_rows_in_a_copy() -> None:
    before = data([[0, 1], [2, 3], [4]])
    seen: list[tuple[int, list[int]]] = []

    def relabel(cid: int, y: torch.Tensor) -> torch.Tensor:
        seen.append((cid, y.tolist()))
        return (y + 1) % 5

    after = chillfl.extend.relabel_rows(before, frozenset({2, 0}), relabel)
    assert seen == [(0, [0, 1]), (2, [4])]  # one call a client, in id order, with its labels as they were
    assert after.dataset.y_train.tolist() == [1, 2, 2, 3, 0]
    assert before.dataset.y_train.tolist() == [0, 1, 2, 3, 4]  # the caller's data set keeps its labels
    assert after.dataset.x_train is before.dataset.x_train and after.train_indices is before.train_indices


def test_a_shared_row_is_rewritten_for_every_client_holding_it() -> None:
    after = chillfl.extend.relabel_rows(data([[0, 1], [1, 2]]), frozenset({0}), lambda cid, y: torch.full_like(y, 4))
    assert after.client_train(1)[1].tolist() == [4, 2]  # row 1 is the attacker's and the honest client's (as documented)


def test_relabel_rows_refuses_labels_of_another_shape_in_one_line() -> None:
    err = pytest.raises(ConfigError, chillfl.extend.relabel_rows, data([[0, 1]]), frozenset({0}), lambda cid, y: y[:1])
    assert err.value.field == "attack.kind" and "client 0" in err.value.message


def test_label_flip_runs_through_relabel_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.attacks.poison as poison

    calls: list[int] = []
    real = poison.relabel_rows

    def spy(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(poison, "relabel_rows", spy)
    chillfl.run(config={**CONFIG, "attack": {"kind": "label_flip", "clients": [0]}}, write=False, progress=False)
    assert calls == [1]  # the built-in is the exported helper, not a copy of it


def test_evaluate_is_the_built_ins_loss_and_is_exported() -> None:
    from chillfl.training.local import evaluate

    assert chillfl.extend.evaluate is evaluate and "evaluate" in chillfl.extend.__all__
    model = nn.Linear(2, 2, bias=False)
    params = {"weight": torch.tensor([[1.0, 0.0], [0.0, 1.0]])}
    x, y = torch.tensor([[2.0, 0.0], [0.0, 2.0]]), torch.tensor([0, 0])
    acc, loss = chillfl.extend.evaluate(model, params, x, y)
    assert acc == 0.5
    assert loss == pytest.approx((np.log1p(np.exp(-2.0)) + np.log1p(np.exp(2.0))) / 2)  # cross-entropy by hand, at T = 1


def test_a_half_reports_its_loss_with_the_exported_evaluate(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A q-FFL-style report with nothing but chillfl.extend (``Trained`` has no loss of its own): each client's loss of
    the model it started from, which in the one round is the sent global model (not the client's trained one)."""
    from chillfl.extend import FedAvg, Stateless, evaluate

    reports: dict[int, float] = {}
    data_of: dict[int, tuple[Any, Any]] = {}
    sent: list[Any] = []
    uploads: dict[int, Any] = {}

    @dataclass(frozen=True)
    class LossHalf(Stateless):
        def finish(self, model: nn.Module, state: Any, trained: Any) -> Any:
            data_of[trained.client_id] = (trained.x, trained.y)  # the sequential executor: the same process
            return {}, {"start_loss": evaluate(model, trained.start, trained.x, trained.y)[1]}

    class Reads(FedAvg):
        def client_half(self) -> Any:
            return LossHalf()

        def aggregate(self, global_params: Any, results: Any, round: int, weights: Any = None) -> Any:
            sent.append({k: v.clone() for k, v in global_params.items()})
            reports.update({r.client_id: float(r.report["start_loss"]) for r in results})
            uploads.update({r.client_id: r.params for r in results})
            return super().aggregate(global_params, results, round, weights)

    out = chillfl.run(config=CONFIG, aggregator=Reads(), write=False, progress=False)
    assert sorted(reports) == [0, 1, 2] and len(sent) == 1
    for cid, loss in reports.items():
        x, y = data_of[cid]
        assert loss == pytest.approx(evaluate(out.model, sent[0], x, y)[1], rel=1e-6)
        assert loss != pytest.approx(evaluate(out.model, uploads[cid], x, y)[1], rel=1e-6)  # not the trained model's

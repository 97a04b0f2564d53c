"""``eval.clients = "all"``: the global model on every client's split, scored in one pass over their test rows.

Each client's accuracy must be what :func:`evaluate` gives it (the same integer counts), and the forward passes a
round makes must not grow with the number of registered clients (counted, no wall-clock).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import chillfl.protocols.common as common
from chillfl.config import load_config
from chillfl.data.client_rows import ClientRows
from chillfl.data.datasets import ArrayDataset
from chillfl.data.federated import FederatedData
from chillfl.experiment import build_experiment
from chillfl.protocols.common import Evaluation
from chillfl.runner import rounds_for
from chillfl.training.local import evaluate


def _data(num_clients: int, *, noise: bool = False, rows: bool = False, broken_row: bool = False, seed: int = 0) -> FederatedData:
    """Clients whose splits are overlapping, unsorted test rows of uneven sizes (some empty, some with a repeated row)."""
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(60, 4, generator=g), torch.randint(0, 3, (60,), generator=g)
    xt, yt = torch.randn(90, 4, generator=g), torch.randint(0, 3, (90,), generator=g)
    if broken_row:
        xt[5, 0] = float("inf")  # the clients holding test row 5 get non-finite logits: NaN, as evaluate gives them
    rng = np.random.default_rng(seed)
    evals = [rng.choice(90, size=int(rng.integers(0, 25)), replace=bool(c % 5 == 0)).astype(np.int64) for c in range(num_clients)]
    evals[1] = np.zeros(0, dtype=np.int64)
    return FederatedData(
        dataset=ArrayDataset("toy", x, y, xt, yt, 3),
        train_indices=[np.arange(2 * (c % 30), 2 * (c % 30) + 2, dtype=np.int64) for c in range(num_clients)],
        eval_indices=ClientRows.from_lists(evals) if rows else evals,
        noise=[0.5 if noise and c % 4 == 3 else 0.0 for c in range(num_clients)] if noise else None,
        public_indices=np.zeros(0, dtype=np.int64),
        seed=seed,
    )


def _evaluation(data: FederatedData, model: nn.Module, batch_size: int = 7) -> Evaluation:
    config = load_config(None, {"eval.clients": "all", "eval.batch_size": batch_size, "model": {"name": "mlp", "hidden": [4]}})
    return Evaluation(config, data, model, torch.device("cpu"))


def _reference(data: FederatedData, model: nn.Module, state: dict[str, torch.Tensor], batch_size: int) -> list[float]:
    """The old path: :func:`evaluate` once per client with a non-empty split, in client order."""
    out = []
    for c in range(data.num_clients):
        xe, ye = data.client_eval(c)
        if len(ye):
            out.append(evaluate(model, state, xe, ye, batch_size)[0])
    return out


def _same(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all((math.isnan(u) and math.isnan(v)) or u == v for u, v in zip(a, b))


@pytest.mark.parametrize("noise", [False, True])
@pytest.mark.parametrize("rows", [False, True])
@pytest.mark.parametrize("broken_row", [False, True])
def test_each_clients_accuracy_is_what_evaluate_gives_it(noise: bool, rows: bool, broken_row: bool) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = _data(40, noise=noise, rows=rows, broken_row=broken_row)
    for batch_size in (7, 1024):  # chunks that cut through clients' rows, and one chunk for all
        evaluation = _evaluation(data, model, batch_size)
        got = evaluation.client_accuracies(state)
        assert _same(got, _reference(data, model, state, batch_size))
        assert _same(got, evaluation.client_accuracies(state))  # the same again, bit for bit
        if broken_row:
            assert any(math.isnan(a) for a in got) and not all(math.isnan(a) for a in got)
        mean, expected = evaluation.metrics(state)["global_client_acc"], common.measured_mean(got)
        assert isinstance(mean, float) and expected is not None and _same([mean], [expected])


def _counted(monkeypatch: pytest.MonkeyPatch, model: nn.Module) -> tuple[list[int], list[int]]:
    """Calls of ``evaluate`` (as the protocols call it) and forward passes of ``model``."""
    calls: list[int] = []
    forwards: list[int] = []
    real = common.evaluate

    def counting(*args: Any, **kwargs: Any) -> tuple[float, float]:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(common, "evaluate", counting)
    model.register_forward_hook(lambda *_: forwards.append(1))
    return calls, forwards


@pytest.mark.parametrize("num_clients", [30, 1000])
def test_scoring_every_client_costs_a_number_of_forwards_that_does_not_grow_with_the_clients(monkeypatch: pytest.MonkeyPatch, num_clients: int) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    evaluation = _evaluation(_data(num_clients), model, batch_size=32)
    calls, forwards = _counted(monkeypatch, model)
    evaluation.metrics(model.state_dict())
    # the global test set (90 rows: 3 forwards of 32), then the union of the clients' rows (at most 90: at most 3)
    assert len(calls) == 1
    assert len(forwards) <= 3 + 3


def test_clients_with_their_own_feature_noise_keep_their_own_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """Their rows are not the test rows: each is scored by evaluate on its noised split."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    data = _data(40, noise=True)
    evaluation = _evaluation(data, model)
    calls, _ = _counted(monkeypatch, model)
    evaluation.metrics(model.state_dict())
    noisy = [c for c in range(40) if data.noise is not None and data.noise[c] != 0 and len(data.eval_indices[c])]
    assert len(calls) == 1 + len(noisy)


def _round_counts(monkeypatch: pytest.MonkeyPatch, num_clients: int) -> tuple[int, int, list[float]]:
    """One round with 10 clients sampled and ``eval.clients = "all"``: evaluate calls and forwards of the global model."""
    overrides = {
        "model": {"name": "mlp", "hidden": [4]},
        "federation.num_clients": num_clients,
        "federation.clients_per_round": 10,
        "federation.rounds": 1,
        "client.batch_size": 2,
        "eval.clients": "all",
        "eval.batch_size": 32,
    }
    exp = build_experiment(load_config(None, overrides), data=_data(num_clients))
    calls, forwards = _counted(monkeypatch, exp.model)
    records = list(rounds_for(exp)(exp))
    return len(calls), len(forwards), [r["global_client_acc"] for r in records]


def test_a_round_scores_a_thousand_clients_with_the_calls_thirty_take(monkeypatch: pytest.MonkeyPatch) -> None:
    small = _round_counts(monkeypatch, 30)
    large = _round_counts(monkeypatch, 1000)
    assert small[:2] == large[:2]
    assert all(isinstance(a, float) for a in large[2])


def test_a_model_that_draws_in_eval_keeps_one_pass_a_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fractional max-pooling draws per forward: one pass over every client's rows would change the draws each row sees."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 12), nn.Unflatten(1, (1, 3, 4)), nn.FractionalMaxPool2d(1, output_size=(3, 2)), nn.Flatten(), nn.Linear(6, 3))
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    data = _data(12)
    evaluation = _evaluation(data, model)
    reference = _reference(data, model, state, 7)
    calls, _ = _counted(monkeypatch, model)
    assert _same(evaluation.client_accuracies(state), reference)
    assert len(calls) == sum(1 for c in range(12) if len(data.eval_indices[c]))

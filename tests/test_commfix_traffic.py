"""What FedFomo, APPLE, VRL-SGD and FedPAC put on the wire, counted by hand on a tiny model.

:class:`Tiny` is ``body`` Linear(4, 3) (12 + 3 = 15 floats, 60 bytes) then ``fc`` Linear(3, 2) (6 + 2 = 8 floats,
32 bytes): :data:`MODEL` = 92 bytes of float32. Every client takes part in every round (:data:`CLIENTS` of them), so
a client's second round is its first as a returning client. Ids travel as int32 (4 bytes), a Python float 8 bytes.

* FedFomo, round 2: each client is sent the 3 others' models and their 3 ids, not the global model (it starts from
  its own theta_i): 3 x 92 + 12 = 288 bytes; it sends its model, the 3 ids and their 3 float64 weights: 92 + 12 + 24.
* APPLE, round 1: the global model, lambda(r) mu (8) and p^0 (4 float32, 16): 116 bytes; up the core model and p_i
  in float32 (16): 108. Round 2: lambda(r) mu and the 3 core models with their ids; p^0 is kept by the client and
  the global model read nowhere (it holds a copy of every other core model): 8 + 276 + 12 = 296.
* VRL-SGD: round 1 is FedAvg's (no Delta_i yet: the zero correction is not priced); round 2 adds -Delta_i (92).
* FedPAC's report, d = 3 features, C = 2 classes: the class means (6 float32, 24), counts (2 int32, 8), V_i
  (1 float32, 4) and h_i (6 float32, 24): 60 bytes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterator

import pytest
import torch
from torch import nn

import chillfl
from chillfl.aggregation.apple import APPLE, P, P0
from chillfl.aggregation.base import ClientResult, Local
from chillfl.aggregation.fedpac import COUNTS, MEANS, STATS, VAR, FedPACClient, features, statistics
from chillfl.protocols.parameters import ParameterSharing
from chillfl.training.local import LocalOutcome, LocalSpec

CLIENTS, ROUNDS = 4, 3
MODEL = 60 + 32
"""Bytes of :class:`Tiny` (float32)."""


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 3)
        self.fc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.body(x)))

    def head_name(self) -> str:
        return "fc"


@pytest.fixture(scope="module")
def data() -> chillfl.TensorData:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(150, 4, generator=gen)
    y = (x[:, 0] + x[:, 1] > 0).long()
    return chillfl.TensorData(x[:120], y[:120], x[120:], y[120:], num_classes=2, name="commfix")


def run(name: str, data: chillfl.TensorData, per_round: int = CLIENTS, **options: Any) -> list[dict[str, Any]]:
    config = {
        "seed": 1, "device": "cpu", "threads": 1, "executor": "sequential",
        "federation": {"num_clients": CLIENTS, "clients_per_round": per_round, "rounds": ROUNDS},
        "client": {"lr": 0.05, "batch_size": 16, "epochs": 1}, "eval": {"client_split_size": 5, "clients": "all"},
        "algorithm": {"name": name, **options},
    }
    torch.manual_seed(0)
    return chillfl.run(model=Tiny(), data=data, config=config, write=False, progress=False).records


def traffic(records: list[dict[str, Any]]) -> list[tuple[int, int]]:
    return [(r["bytes_up"], r["bytes_down"]) for r in records]


def without_bytes(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if "bytes" not in k} for r in records]


def test_fedfomo_does_not_price_the_global_model_for_a_returning_client(data: chillfl.TensorData) -> None:
    later = (MODEL + 3 * 4 + 3 * 8, 3 * MODEL + 3 * 4)  # up: model, ids, weights; down: 3 models and their ids
    assert traffic(run("fedfomo", data)) == [(CLIENTS * MODEL, CLIENTS * MODEL)] + [(CLIENTS * later[0], CLIENTS * later[1])] * (ROUNDS - 1)


def test_apple_prices_the_global_model_and_p0_only_while_a_client_reads_them(data: chillfl.TensorData) -> None:
    first = (MODEL + 4 * 4, MODEL + 8 + 4 * 4)  # up: core model, p_i (float32); down: global model, lambda mu, p0
    later = (MODEL + 3 * 4 + 4 * 4, 8 + 3 * MODEL + 3 * 4)  # up: core model, ids, p_i; down: lambda mu, 3 core models, ids
    assert traffic(run("apple", data)) == [(CLIENTS * first[0], CLIENTS * first[1])] + [(CLIENTS * later[0], CLIENTS * later[1])] * (ROUNDS - 1)


def test_apple_sends_the_global_model_while_a_slot_is_not_held() -> None:
    """A returning client that holds no copy of some other client's core model fills that slot with the global model."""
    server = APPLE(CLIENTS, Tiny(), client_sizes=[1] * CLIENTS, rounds=ROUNDS)
    g = {k: v.detach() for k, v in Tiny().state_dict().items()}
    assert server.downlink(0, 0, g).held == () and server.downlink(0, 0, g).local == ()  # first round: it reads both
    server.models[0], server.models[1] = g, g  # 0 and 1 have trained; 2 and 3 have not: their slots are the global model
    server.sent[0] = {1}
    down = server.downlink(0, 1, g)
    assert down.held == () and down.local == (P0,)
    server.models[2], server.models[3] = g, g
    assert set(server.downlink(0, 2, g).held) == set(g)  # 2 and 3 chosen now: every other slot held after this downlink


def test_vrl_sgd_prices_no_zero_correction(data: chillfl.TensorData) -> None:
    assert traffic(run("vrl_sgd", data)) == [(CLIENTS * MODEL, CLIENTS * MODEL)] + [(CLIENTS * MODEL, CLIENTS * 2 * MODEL)] * (ROUNDS - 1)


def test_vrl_sgd_first_rounds_cost_fedavgs_under_sampling(data: chillfl.TensorData) -> None:
    """Two clients a round: a round's new clients cost FedAvg's downlink, its returning ones one model more."""
    records = run("vrl_sgd", data, per_round=2)
    seen: set[int] = set()
    for r in records:
        returning = sum(c in seen for c in r["clients"])
        assert r["bytes_down"] == 2 * MODEL + returning * MODEL
        seen.update(r["clients"])


def test_fedpac_reports_in_the_models_dtype_and_counts_as_int32(data: chillfl.TensorData) -> None:
    report = 2 * 3 * 4 + 2 * 4 + 4 + 2 * 3 * 4  # means, counts, V_i, h_i
    assert {up for up, _ in traffic(run("fedpac", data))} == {CLIENTS * (MODEL + report)}


def test_fedpac_features_are_in_the_models_dtype() -> None:
    model = Tiny().double()
    state = {k: v.detach() for k, v in model.state_dict().items()}
    x = torch.randn(5, 4, dtype=torch.float64)
    out = features(model, state, x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.relu(model.body(x)).detach(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fedpac_reports_in_the_models_dtype(dtype: torch.dtype) -> None:
    """The client's statistics as it sends them (its two trainings answered with the start model)."""
    model = Tiny().to(dtype)
    half = FedPACClient(model, frozenset({"fc.weight", "fc.bias"}), frozenset({"body.weight", "body.bias"}), 2, 1)
    start = {k: v.detach() for k, v in model.state_dict().items()}
    x, y = torch.randn(6, 4, dtype=dtype), torch.tensor([0, 1, 0, 1, 1, 0])
    program = half.train(Local(0, x, y, start, {}, 0.1, {}, 0, LocalSpec(1, 6)))
    outcome = LocalOutcome(next(program).start, 1, 0.0)
    program.send(outcome)
    with pytest.raises(StopIteration) as stop:
        program.send(outcome)
    report = stop.value.value.report
    assert report[MEANS].dtype == report[VAR].dtype == report[STATS].dtype == dtype
    assert report[COUNTS].dtype == torch.int32 and report[COUNTS].tolist() == [3, 3]
    v, h = statistics(features(model, start, x).double(), y, 2)
    assert torch.equal(report[VAR], v.to(dtype)) and torch.equal(report[STATS], h.to(dtype))  # float64 sums, rounded once


@pytest.fixture
def poisoned(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every downlink's held start entries and local context entries (the priced-as-free ones) moved by 7: a run whose
    clients never read them is the same run."""
    configure: Callable[..., Any] = ParameterSharing.configure

    def shifted(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value + 7.0
        if isinstance(value, dict):
            return {k: shifted(v) for k, v in value.items()}
        return value

    def poisoning(self: ParameterSharing, round: int, sampled: Any) -> Any:
        tasks = configure(self, round, sampled)
        out = []
        for t in tasks:
            d = t.downlink
            start = {k: shifted(v) if k in d.held else v for k, v in d.start.items()}
            context = {k: shifted(v) if k in d.local else v for k, v in d.context.items()}
            out.append(replace(t, downlink=replace(d, start=start, context=context)))
        return out

    monkeypatch.setattr(ParameterSharing, "configure", poisoning)
    yield


@pytest.mark.parametrize("name", ["fedfomo", "apple"])
def test_what_is_not_priced_is_not_read(name: str, data: chillfl.TensorData, request: pytest.FixtureRequest) -> None:
    """The global model a returning FedFomo/APPLE client is not charged for, and APPLE's kept p0, are never read:
    moving them changes no metric (every client's accuracies and losses, the global model's)."""
    plain = without_bytes(run(name, data, per_round=2))
    request.getfixturevalue("poisoned")
    assert without_bytes(run(name, data, per_round=2)) == plain


def test_apple_p_i_reaches_the_server_exactly() -> None:
    """p_i travels in the model's dtype (float32 here); the server's float64 copy is that value widened, as before."""
    server = APPLE(2, Tiny(), client_sizes=[1, 1], rounds=ROUNDS)
    p = torch.tensor([0.3, 0.7])
    g = {k: v.detach() for k, v in Tiny().state_dict().items()}
    server.aggregate(g, [ClientResult(0, g, 1, 1, 0.1, 1.0, 0.0, {P: p})], 0)
    assert server.relations[0].dtype == torch.float64 and torch.equal(server.relations[0], p.double())

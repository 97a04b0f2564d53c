"""Client dropout, stragglers and min_clients: seeded, counted only for what arrived, the same under every executor."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.config import load_config
from chillfl.config import FederationConfig
from chillfl.engine.loop import availability
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import rounds_for, run_experiment
from chillfl.training.local import completed_steps

from lent_pools import pools

BASE = {
    "seed": 5,
    "dataset.name": "digits",
    "model.name": "mlp",
    "federation.num_clients": 6,
    "federation.rounds": 3,
    "client.batch_size": 32,
    "client.lr": 0.1,
    "eval.client_split_size": 20,
}


def test_completed_steps_is_a_prefix_of_at_least_one_batch() -> None:
    order = [torch.tensor([i]) for i in range(10)]
    assert completed_steps(order, 1.0) == order
    assert [int(b) for b in completed_steps(order, 0.35)] == [0, 1, 2]  # floor(3.5) = 3
    assert [int(b) for b in completed_steps(order, 0.01)] == [0]  # at least one step


def test_availability_is_seeded_and_follows_the_rules() -> None:
    rules = FederationConfig(num_clients=20, dropout=0.5, stragglers=0.5, straggler_work="fixed", straggler_fraction=0.25)
    a = availability(1, 4, list(range(20)), rules)
    assert a == availability(1, 4, list(range(20)), rules)
    assert sorted(a.reporting + a.dropped) == list(range(20)) and a.reporting == sorted(a.reporting)
    assert 0 < len(a.dropped) < 20 and set(a.work) <= set(a.reporting) and set(a.work.values()) == {0.25}
    assert availability(2, 4, list(range(20)), rules) != a


def _spy(exp: Any) -> list[tuple[dict, list, dict]]:
    calls: list[tuple[dict, list, dict]] = []
    aggregate = exp.aggregator.aggregate

    def spy(global_params: dict, results: list, rnd: int) -> dict:
        out = aggregate(global_params, results, rnd)
        calls.append(({k: v.clone() for k, v in global_params.items()}, list(results), out))
        return out

    exp.aggregator.aggregate = spy
    return calls


def test_only_reporting_clients_are_aggregated_and_counted() -> None:
    over = {**BASE, "federation.dropout": 0.4, "federation.stragglers": 0.5, "federation.straggler_work": "fixed", "federation.straggler_fraction": 0.5}
    exp = build_experiment(load_config(None, over))
    calls = _spy(exp)
    records = list(rounds_for(exp)(exp))
    assert any(r["dropped"] for r in records) and any(r["stragglers"] for r in records)
    param_bytes = sum(v.numel() * v.element_size() for v in exp.initial_state.values())
    for record, (before, results, after) in zip(records, calls):
        ids = [r.client_id for r in results]
        assert ids == record["clients"] and not set(ids) & set(record["dropped"])
        assert record["bytes_up"] == record["bytes_down"] == len(ids) * param_bytes  # dropped clients get and send nothing
        # FedAvg over what arrived, by hand: sum_i n_i w_i / sum_i n_i
        n = torch.tensor([float(r.num_samples) for r in results], dtype=torch.float64)
        for key, value in after.items():
            if value.is_floating_point():
                expected = sum(ni * r.params[key].double() for ni, r in zip(n, results)) / n.sum()
                torch.testing.assert_close(value.double(), expected, rtol=1e-6, atol=1e-7)
        # a straggler ran floor(0.5 * steps) steps, everyone else all of them
        for r in results:
            steps = math.ceil(r.num_samples / 32)
            steps -= 1 if r.num_samples % 32 == 1 and steps > 1 else 0  # a trailing single sample merges
            expected_steps = max(1, int(0.5 * steps)) if str(r.client_id) in record["stragglers"] else steps
            assert r.num_steps == expected_steps


def test_too_few_clients_skip_or_retry_the_round() -> None:
    over = {**BASE, "federation.clients_per_round": 3, "federation.dropout": 0.3, "federation.min_clients": 3, "federation.rounds": 8}
    skipped = run_experiment(load_config(None, over), write=False, progress=False).records
    assert any(r.get("skipped") for r in skipped) and not all(r.get("skipped") for r in skipped)
    for r in skipped:
        if r.get("skipped"):
            assert r["clients"] == [] and len(r["dropped"]) > 0 and "train_loss" not in r
    retried = run_experiment(load_config(None, {**over, "federation.on_too_few": "retry"}), write=False, progress=False).records
    assert any(r["attempts"] > 1 for r in retried)
    assert sum(bool(r.get("skipped")) for r in retried) < sum(bool(r.get("skipped")) for r in skipped)


@pytest.mark.parametrize("executor", ["processes", "vectorized"])
def test_dropout_and_stragglers_are_deterministic_under_every_executor(executor: str) -> None:
    over = {**BASE, "federation.dropout": 0.3, "federation.stragglers": 0.5, "algorithm.name": "fednova"}
    seq = run_experiment(load_config(None, over), write=False, progress=False).records
    assert seq == run_experiment(load_config(None, over), write=False, progress=False).records
    other = run_experiment(load_config(None, {**over, "executor": executor}), write=False, progress=False, pools=pools()).records  # lent workers
    if executor == "processes":
        assert other == seq
    else:
        assert [r["clients"] for r in other] == [r["clients"] for r in seq]
        assert other[-1]["train_loss"] == pytest.approx(seq[-1]["train_loss"], rel=1e-4)


def test_soft_label_protocol_counts_only_reporting_clients() -> None:
    over = {**BASE, "federation.dropout": 0.4, "distillation.method": "scarlet", "distillation.public_size": 100, "distillation.subset_size": 30}
    records = run_experiment(load_config(None, over), write=False, progress=False).records
    assert any(r["dropped"] for r in records)
    assert all(not set(r["clients"]) & set(r["dropped"]) for r in records)


@pytest.mark.parametrize(("key", "value"), [("dropout", 1.0), ("stragglers", -0.1), ("straggler_fraction", 0.0), ("min_clients", 7), ("on_too_few", "wait")])
def test_bad_values_name_the_field(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {**BASE, f"federation.{key}": value})
    assert info.value.field == f"federation.{key}"


def test_a_client_without_training_rows_reports_nothing_and_the_draws_stay() -> None:
    """Clients 3 and 7 hold no training rows: never configured, listed as ``no_data``, not counted towards min_clients;
    everyone else's dropout and straggler draws are those of the same round without them."""
    rules = FederationConfig(num_clients=10, dropout=0.3, stragglers=0.5, min_clients=2)
    plain, empty = availability(3, 2, list(range(10)), rules), availability(3, 2, list(range(10)), rules, frozenset({3, 7}))
    assert empty.no_data == [3, 7] and plain.no_data == []
    assert empty.reporting == [c for c in plain.reporting if c not in (3, 7)]
    assert empty.dropped == [c for c in plain.dropped if c not in (3, 7)] and empty.work == {c: w for c, w in plain.work.items() if c not in (3, 7)}
    alone = availability(3, 2, [3, 7], FederationConfig(num_clients=10), frozenset({3, 7}))
    assert alone.skipped and alone.no_data == [3, 7] and alone.dropped == []


@pytest.mark.parametrize("table", [{"algorithm": {"name": "scaffold"}}, {"algorithm": {"name": "fednova"}}, {"algorithm": {"name": "qffl"}},
                                   {"prototypes": {"method": "fedproto"}}, {"algorithm": {"name": "fedavg", "weighting": "uniform"}}],
                         ids=lambda t: str(next(iter(next(iter(t.values())).values()))))
def test_methods_run_beside_a_client_without_training_rows(tmp_path: Path, table: dict[str, Any]) -> None:
    """It was a traceback (SCAFFOLD, FedNova, FedProto divide by its steps or rows), a NaN (q-FFL), or its untrained model in
    a uniform mean, when a round sampled a client a Dirichlet draw (small alpha) or a partition file left empty."""
    import json

    first = run_experiment(load_config(None, {**BASE, "out_dir": str(tmp_path), "name": "first", "federation.rounds": 1}), progress=False)
    saved = json.loads((first.folder / "partition.json").read_text())
    saved["clients"][1] = saved["clients"][1] + saved["clients"][0]  # client 0's rows go to client 1
    saved["clients"][0] = []
    (tmp_path / "p.json").write_text(json.dumps(saved))
    config = load_config(None, {**BASE, "partition.from": str(tmp_path / "p.json"), "federation.clients_per_round": 6}).with_overrides(table)
    records = run_experiment(config, write=False, progress=False).records
    assert all(r["no_data"] == [0] and 0 not in r["clients"] and len(r["clients"]) == 5 for r in records)
    assert all(math.isfinite(r["global_loss"]) for r in records)


def test_dropped_stragglers_are_the_partial_policys_stragglers_reporting_nothing() -> None:
    """``straggler_policy = "drop"`` (FedProx paper's FedAvg baseline): the very clients that straggle under ``partial``
    at the same seed report nothing, so FedAvg-drop and FedProx-partial compare on the same slow devices."""
    sampled = list(range(20))
    partial = FederationConfig(num_clients=20, dropout=0.2, stragglers=0.5)
    drop = FederationConfig(num_clients=20, dropout=0.2, stragglers=0.5, straggler_policy="drop")
    for rnd in range(3):
        a, b = availability(3, rnd, sampled, partial), availability(3, rnd, sampled, drop)
        assert a.work and not b.work
        assert b.reporting == [c for c in a.reporting if c not in a.work]
        assert b.dropped == sorted(a.dropped + list(a.work))


def test_straggler_policy_is_read_from_the_config() -> None:
    assert load_config(None, {**BASE, "federation.straggler_policy": "drop"}).federation.straggler_policy == "drop"
    with pytest.raises(ConfigError, match="straggler_policy"):
        load_config(None, {**BASE, "federation.straggler_policy": "ignore"})

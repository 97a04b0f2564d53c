"""Robust aggregators (median, trimmed_mean, krum): hand-computed rounds, a byzantine client scaled by 100,
the registry and config errors, and short runs under every executor."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.aggregation.registry import algorithm_names, make_aggregator
from chillfl.aggregation.robust import Krum, KrumOptions, Median, TrimmedMean, TrimmedMeanOptions, coordinate_median, krum_scores, trimmed_mean
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment

from lent_pools import pools



def _results(values: list[list[float]], ints: list[int] | None = None) -> list[ClientResult]:
    out = []
    for cid, v in enumerate(values):
        params = {"w": torch.tensor(v, dtype=torch.float32)}
        if ints is not None:
            params["n"] = torch.tensor(ints[cid])
        out.append(ClientResult(cid, params, num_samples=10 * (cid + 1), num_steps=1, lr=0.1, temperature=1.0, train_loss=0.0))
    return out


# Five clients from global x = 0; client 4's update (5, -5) is scaled by 100 (a byzantine client).
HONEST = [[1.0, -1.0], [2.0, -2.0], [3.0, -3.0], [4.0, -4.0]]
ATTACKED = [*HONEST, [500.0, -500.0]]
X0 = {"w": torch.zeros(2)}


def test_byzantine_client_scaled_by_100_moves_fedavg_but_not_the_robust_rules() -> None:
    results = _results(ATTACKED)
    # FedAvg (weights 10..50 / 150): (10 + 40 + 90 + 160 + 25000) / 150 = 168.67: dragged off by the attacker
    assert FedAvg().aggregate(X0, results, 0)["w"][0].item() == pytest.approx(25300 / 150)
    # median of (1, 2, 3, 4, 500) = 3
    assert Median().aggregate(X0, results, 0)["w"].tolist() == [3.0, -3.0]
    # trimmed mean, beta = 0.2: floor(0.2 * 5) = 1 dropped at each end -> mean(2, 3, 4) = 3
    assert TrimmedMean(TrimmedMeanOptions(beta=0.2)).aggregate(X0, results, 0)["w"].tolist() == [3.0, -3.0]
    # Krum, f = 1: n - f - 2 = 2 nearest neighbours, squared distances |a - b|^2 * 2 (two coordinates):
    # scores: c0 = 2(1 + 4) = 10, c1 = 2(1 + 1) = 4, c2 = 4, c3 = 2(1 + 4) = 10, c4 = 2(496^2 + 497^2)
    flat = torch.tensor(ATTACKED, dtype=torch.float64)
    assert krum_scores(flat, 1).tolist() == pytest.approx([10.0, 4.0, 4.0, 10.0, 2 * (496**2 + 497**2)], rel=1e-12)
    krum = Krum(KrumOptions(f=1))
    assert krum.aggregate(X0, results, 0)["w"].tolist() == [2.0, -2.0]  # tie c1/c2 -> lower id
    assert krum.round_metrics() == {"selected": [1]}
    # Multi-Krum, m = 3: c1, c2, then c0 (ties with c3 at 10 -> lower id): mean(2, 3, 1) = 2
    multi = Krum(KrumOptions(f=1, m=3))
    assert multi.aggregate(X0, results, 0)["w"].tolist() == [2.0, -2.0]
    assert multi.round_metrics() == {"selected": [0, 1, 2]}


def test_krum_distances_do_not_depend_on_a_common_offset() -> None:
    """Distances are translation-invariant, so models far from the origin (a common offset of 1e8 here; in practice
    weights of norm^2 ~ 1e4 around updates of norm^2 ~ 1e-7) must score as their differences do. The expansion
    ||a||^2 + ||b||^2 - 2 a.b on the raw models loses those digits to cancellation: it gave 0, 0, 0, 8 for 10, 4, 4, 10
    and Krum picked client 0. Scores as in the test above: 10, 4, 4, 10, 2 (496^2 + 497^2)."""
    flat = torch.tensor(ATTACKED, dtype=torch.float64) + 1e8
    assert krum_scores(flat, 1).tolist() == pytest.approx([10.0, 4.0, 4.0, 10.0, 2 * (496**2 + 497**2)], rel=1e-12)
    krum = Krum(KrumOptions(f=1))
    krum.aggregate(X0, [ClientResult(r.client_id, {"w": r.params["w"].double() + 1e8}, r.num_samples, 1, 0.1, 1.0, 0.0) for r in _results(ATTACKED)], 0)
    assert krum.round_metrics() == {"selected": [1]}


def test_multi_krum_once_or_repeated_by_hand() -> None:
    # six clients at 0..5, f = 1, m = 3.
    # once (Blanchard et al.): n - f - 2 = 3 nearest: c0 1+4+9 = 14, c1 1+1+4 = 6, c2 6, c3 6, c4 6, c5 14 -> c1, c2, c3
    # (ties to the lower id): mean (1 + 2 + 3) / 3 = 2.
    # repeated (Krum on the rest): the same first pick c1; R = {0, 2, 3, 4, 5}, 2 nearest: c0 4+9 = 13, c2 1+4 = 5,
    # c3 1+1 = 2, c4 2, c5 1+4 = 5 -> c3; R = {0, 2, 4, 5}, max(4 - 3, 1) = 1 nearest: c0 4, c2 4, c4 1, c5 1 -> c4:
    # mean (1 + 3 + 4) / 3 = 8/3.
    values = [[float(v)] for v in range(6)]
    once = Krum(KrumOptions(f=1, m=3))
    assert once.aggregate({"w": torch.zeros(1)}, _results(values), 0)["w"].tolist() == [2.0]
    assert once.round_metrics() == {"selected": [1, 2, 3]}
    repeated = Krum(KrumOptions(f=1, m=3, selection="repeated"))
    assert repeated.aggregate({"w": torch.zeros(1)}, _results(values), 0)["w"].tolist() == pytest.approx([8 / 3])
    assert repeated.round_metrics() == {"selected": [1, 3, 4]}
    # m = 1: both are Krum
    assert Krum(KrumOptions(f=1, selection="repeated")).aggregate(X0, _results(ATTACKED), 0)["w"].tolist() == [2.0, -2.0]


def test_krum_with_too_few_clients_for_its_neighbours_scores_with_one() -> None:
    # a round left with n = 3 for f = 1 (dropouts): n - f - 2 = 0 neighbours, so each scores with its nearest one
    # models 10, 0, 1: scores min(10^2, 9^2) = 81, 1^2 = 1, 1^2 = 1 -> client 1 (tie to the lower id), w = 0
    # (with no neighbour every score would be 0 and Krum would take client 0, w = 10)
    assert krum_scores(torch.tensor([[10.0], [0.0], [1.0]], dtype=torch.float64), 1).tolist() == [81.0, 1.0, 1.0]
    agg = Krum(KrumOptions(f=1))
    out = agg.aggregate({"w": torch.zeros(1)}, _results([[10.0], [0.0], [1.0]]), 0)
    assert out["w"].tolist() == [0.0]
    assert agg.round_metrics() == {"selected": [1]}


def test_even_count_median_and_trimming_by_hand() -> None:
    v = torch.tensor([[4.0], [1.0], [3.0], [10.0]], dtype=torch.float64)
    assert coordinate_median(v).tolist() == [3.5]  # (3 + 4) / 2
    assert trimmed_mean(v, 0.25).tolist() == [3.5]  # floor(1) each end: mean(3, 4)
    assert trimmed_mean(v, 0.0).tolist() == [4.5]  # beta 0: the plain mean
    assert trimmed_mean(v, 0.2).tolist() == [4.5]  # floor(0.8) = 0: nothing trimmed


def test_per_coordinate_not_per_client() -> None:
    # each coordinate's median comes from a different client
    results = _results([[1.0, 9.0, 5.0], [2.0, 7.0, 4.0], [3.0, 8.0, 6.0]], ints=[3, 7, 5])
    out = Median().aggregate({}, results, 0)
    assert out["w"].tolist() == [2.0, 8.0, 5.0] and out["w"].dtype == torch.float32
    assert out["n"].item() == 7  # integer buffers (num_batches_tracked) take the max, as FedAvg


def test_stateless_state_dicts() -> None:
    for agg in (Median(), TrimmedMean(), Krum()):
        assert agg.state_dict() == {}
        agg.load_state_dict({})
        with pytest.raises(ValueError):
            agg.load_state_dict({"m": 1})


def test_registered_listed_and_options_validated(capsys: pytest.CaptureFixture[str]) -> None:
    assert {"median", "trimmed_mean", "krum"} <= set(algorithm_names())
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("median", "trimmed_mean", "krum"))
    model = torch.nn.Linear(2, 2)
    agg, terms = make_aggregator("krum", {"f": 2, "m": 3}, num_clients=10, model=model, seed=0)
    assert isinstance(agg, Krum) and (agg.f, agg.m) == (2, 3) and terms == []
    with pytest.raises(ConfigError) as err:
        make_aggregator("trimmed_mean", {"beta": 0.5}, num_clients=10, model=model, seed=0)
    assert err.value.field == "algorithm.beta"
    with pytest.raises(ConfigError) as err:
        make_aggregator("krum", {"fraction": 0.1}, num_clients=10, model=model, seed=0)
    assert err.value.field.startswith("algorithm")
    with pytest.raises(ConfigError) as err:
        make_aggregator("pa3fed", {"base": "median"}, num_clients=10, model=model, seed=0)
    assert err.value.field == "algorithm.base" and "weights" in err.value.message


@pytest.mark.parametrize("options,field", [({"f": 1}, "algorithm.f"), ({"f": 0, "m": 4}, "algorithm.m")])
def test_krum_checks_f_and_m_against_clients_per_round(options: dict[str, Any], field: str) -> None:
    # 3 clients per round: n > 2f + 2 allows f = 0 only; m <= n - f = 3
    cfg = load_config(None, {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 6, "federation.clients_per_round": 3,
                             "algorithm": {"name": "krum", **options}})
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg)
    assert err.value.field == field


def _run(algorithm: dict[str, Any], executor: str) -> list[dict[str, Any]]:
    overrides = {
        "executor": executor, "seed": 1, "dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 6,
        "federation.clients_per_round": 5, "federation.rounds": 2, "client.batch_size": 32, "client.lr": 0.05,
        "eval.client_split_size": 20, "algorithm": algorithm,
    }
    return run_experiment(load_config(None, overrides), write=False, progress=False, pools=pools()).records  # processes: lent workers (lent_pools)


@pytest.mark.parametrize("algorithm", [{"name": "median"}, {"name": "trimmed_mean", "beta": 0.2}, {"name": "krum", "f": 1, "m": 2}])
def test_end_to_end_under_every_executor(algorithm: dict[str, Any]) -> None:
    seq = _run(algorithm, "sequential")
    assert [r["round"] for r in seq] == [1, 2] and seq[-1]["global_acc"] > 0.2
    assert _run(algorithm, "processes") == seq
    vec = _run(algorithm, "vectorized")
    assert vec[-1]["train_loss"] == pytest.approx(seq[-1]["train_loss"], rel=1e-4)
    assert vec[-1]["global_acc"] == pytest.approx(seq[-1]["global_acc"], abs=0.01)
    if algorithm["name"] == "krum":
        assert all(len(r["agg_selected"]) == 2 and set(r["agg_selected"]) <= set(r["clients"]) for r in seq)


@pytest.mark.parametrize("make", [Median, lambda: TrimmedMean(TrimmedMeanOptions(beta=0.2)), lambda: Krum(KrumOptions(f=1, m=2))])
def test_resume_from_a_saved_state_is_bitwise(make: Any, tmp_path: Any) -> None:
    """A checkpointed aggregator (its state_dict through torch.save) continues exactly as the one that never stopped."""
    gen = torch.Generator().manual_seed(0)
    rounds = [_results(torch.randn(5, 3, generator=gen).tolist()) for _ in range(4)]
    original = make()
    for r, results in enumerate(rounds[:2]):
        original.aggregate(X0, results, r)
    torch.save(original.state_dict(), tmp_path / "agg.pt")
    restored = make()
    restored.load_state_dict(torch.load(tmp_path / "agg.pt", weights_only=True))
    for r, results in enumerate(rounds[2:], start=2):
        a, b = original.aggregate(X0, results, r), restored.aggregate(X0, results, r)
        assert torch.equal(a["w"], b["w"]) and original.round_metrics() == restored.round_metrics()

"""``federation.sampling = "poisson"``: each client in a round independently with q = sample_size() / num_clients, from its
own seeded stream; a round that draws nobody is skipped; the default fixed-size draws are unchanged."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from chillfl.config import FederationConfig, load_config
from chillfl.engine.loop import availability, draw_clients, poisson_clients, sample_clients
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment
from chillfl.seeds import derive_seed

BASE: dict[str, Any] = {
    "seed": 1,  # Poisson at q = 2/6 draws [0, 1, 5], [1], then nobody in round 3
    "dataset.name": "digits",
    "model.name": "mlp",
    "federation.num_clients": 6,
    "federation.clients_per_round": 2,
    "federation.rounds": 3,
    "federation.sampling": "poisson",
    "client.batch_size": 32,
    "client.lr": 0.1,
    "eval.client_split_size": 20,
}


def test_poisson_draws_by_hand() -> None:
    # seed 7, round 3, 20 clients, q = 5/20 = 0.25: one uniform per client id from the stream derive_seed(7, "poisson", 3);
    # u = 0.361 0.671 0.830 0.922 0.217 0.811 0.016 0.577 0.398 0.169 0.011 0.865 0.376 0.895 0.441 0.539 0.843 0.825 0.035 0.984
    # below 0.25: ids 4 (0.217), 6 (0.016), 9 (0.169), 10 (0.011), 18 (0.035)
    u = np.random.default_rng(derive_seed(7, "poisson", 3)).random(20)
    assert [i for i in range(20) if u[i] < 0.25] == [4, 6, 9, 10, 18]
    assert poisson_clients(7, 3, 20, 0.25) == [4, 6, 9, 10, 18]
    assert draw_clients(7, 3, 20, 5, "poisson") == [4, 6, 9, 10, 18]
    assert draw_clients(7, 3, 20, 20, "poisson") == list(range(20))  # q = 1: everyone
    assert poisson_clients(7, 4, 20, 0.25) != poisson_clients(7, 3, 20, 0.25)  # each round its own stream


def test_the_fixed_draws_are_unchanged() -> None:
    # pinned from the code before Poisson sampling existed: the default path draws exactly what it drew
    assert FederationConfig().sampling == "fixed"
    assert sample_clients(7, 3, 100, 10) == [1, 9, 10, 19, 30, 47, 57, 63, 77, 90]
    assert sample_clients(0, 0, 10, 3) == [1, 3, 4]
    assert draw_clients(7, 3, 100, 10) == draw_clients(7, 3, 100, 10, "fixed") == sample_clients(7, 3, 100, 10)


def test_inclusion_rate_is_q_and_the_count_varies() -> None:
    # 2000 rounds, 10 clients, q = 0.3: each client's count is Binomial(2000, 0.3), mean 600, sd sqrt(2000 * 0.21) = 20.5;
    # 6 sd (123) is a bound no seed should cross (two-sided tail ~2e-9 per client)
    n, q, rounds = 10, 0.3, 2000
    draws = [poisson_clients(11, r, n, q) for r in range(rounds)]
    counts = np.bincount([c for d in draws for c in d], minlength=n)
    assert np.all(np.abs(counts - q * rounds) < 6 * math.sqrt(rounds * q * (1 - q)))
    sizes = [len(d) for d in draws]
    assert min(sizes) == 0 and max(sizes) >= 6  # not a fixed count: P(size 0) = 0.7^10 = 2.8 %, about 56 rounds of 2000
    assert all(d == sorted(set(d)) for d in draws)


def test_a_round_that_draws_nobody_is_skipped() -> None:
    empty = availability(1, 2, [], FederationConfig(num_clients=6, min_clients=1, on_too_few="retry", sampling="poisson"))
    assert empty.skipped and empty.reporting == [] and empty.dropped == [] and empty.attempts == 0  # nothing to draw
    records = run_experiment(load_config(None, BASE), write=False, progress=False).records
    assert [r["clients"] for r in records] == [[0, 1, 5], [1], []]
    skipped = records[2]
    assert skipped["skipped"] is True and skipped["sampled"] == [] and skipped["dropped"] == [] and skipped["attempts"] == 0
    assert "train_loss" not in skipped and "skipped" not in records[1]


def test_sequential_and_vectorized_runs_agree() -> None:
    seq = run_experiment(load_config(None, BASE), write=False, progress=False).records
    vec = run_experiment(load_config(None, {**BASE, "executor": "vectorized"}), write=False, progress=False).records
    participation = ("round", "clients", "sampled", "skipped", "attempts", "bytes_up", "bytes_down")
    assert [{k: r.get(k) for k in participation} for r in vec] == [{k: r.get(k) for k in participation} for r in seq]
    for a, b in zip(seq, vec):  # vmap's float path (docs/reproducibility.md): close, not bitwise
        if "train_loss" in a:
            assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)


def test_a_bad_sampling_value_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, {**BASE, "federation.sampling": "uniform"})
    assert info.value.field == "federation.sampling"


def test_a_skipped_last_round_keeps_the_runs_communication_summary() -> None:
    out = run_experiment(load_config(None, BASE), write=False, progress=False)  # round 3 drew nobody (BASE)
    assert out.records[-1]["skipped"] is True and "bytes_cumulative" not in out.records[-1]
    assert out.summary["communication"]["bytes_total"] == out.records[1]["bytes_cumulative"] > 0


@pytest.mark.parametrize(
    "method",
    [
        pytest.param({}, id="parameters"),
        pytest.param({"privacy.mechanism": "local", "privacy.noise_multiplier": 0.5}, id="local"),  # the accountant around it (dp-fedavg releases
        # the round instead: tests/test_privacy_empty_rounds.py)
        pytest.param({"prototypes.method": "fedproto"}, id="prototypes"),
        pytest.param({"distillation.method": "dsfl", "distillation.public_size": 60, "distillation.subset_size": 20}, id="soft-labels"),
    ],
)
def test_a_skipped_last_round_still_evaluates_the_final_model(method: dict[str, Any]) -> None:
    # eval.every > rounds: only the last round is due, and it drew nobody (BASE). Before, no round evaluated the global
    # model: final_global_acc was missing (with eval.every = 2 over 6 rounds it was round 4's, not the saved model's).
    out = run_experiment(load_config(None, {**BASE, **method, "eval.every": 10}), write=False, progress=False)
    *trained, last = out.records
    assert last["skipped"] is True and all("global_acc" not in r for r in trained)
    assert out.summary["final_global_acc"] == last["global_acc"] is not None
    if "calibration" in out.summary:  # the saved model's accuracy, measured apart from the rounds
        assert out.summary["calibration"]["accuracy"] == pytest.approx(last["global_acc"], abs=1e-12)
    if "privacy.mechanism" in method:
        assert "epsilon" in last or "epsilon" in trained[-1]


def test_a_skipped_rounds_evaluation_sits_at_the_bytes_sent_so_far() -> None:
    from chillfl.metrics.communication import accuracy_vs_bytes, communication_summary

    records = [
        {"round": 1, "bytes_cumulative": 100, "global_acc": 0.2},
        {"round": 2, "skipped": True},
        {"round": 3, "bytes_cumulative": 250},  # eval.every = 2: not evaluated
        {"round": 4, "skipped": True, "global_acc": 0.6},  # the skipped last round evaluates the final model
    ]
    assert accuracy_vs_bytes(records, "global_acc") == ([100, 250], [0.2, 0.6])  # before: ([100], [0.2]), the final point lost
    assert communication_summary(records, target=0.5)["bytes_to_target"] == 250  # before: None (never reached)
    assert accuracy_vs_bytes([{"round": 1, "global_acc": 0.3}], "global_acc") == ([], [])  # no bytes counted: no points


def test_compare_prices_a_target_first_reached_in_a_skipped_round() -> None:
    from chillfl.report.compare import build_rows
    from chillfl.runner import RunOutput
    from chillfl.sweeps.plan import Variant

    base, late = Variant("base", {}), Variant("late", {})
    evaluated = [{"round": 1, "bytes_cumulative": 100, "global_acc": 0.6}, {"round": 2, "bytes_cumulative": 200, "global_acc": 0.6}]
    skipped_last = [{"round": 1, "bytes_cumulative": 100, "global_acc": 0.4}, {"round": 2, "skipped": True, "global_acc": 0.6}]
    outputs = {"base": RunOutput(None, evaluated, {"best_global_acc": 0.6, "final_global_acc": 0.6}),
               "late": RunOutput(None, skipped_last, {"best_global_acc": 0.6, "final_global_acc": 0.6})}
    row = build_rows([base, late], outputs, base, base)[1]
    assert row["rounds_to_target"] == 2 and row["mb_to_target"] == 100 / 1e6  # before: None (the skipped record has no bytes)


def test_a_run_whose_every_round_was_skipped_says_so(caplog: pytest.LogCaptureFixture) -> None:
    # seed 1, q = 1/6: nobody in either round. Before, the run ended silently with the initial model's accuracy as its result.
    config = load_config(None, {**BASE, "federation.clients_per_round": 1, "federation.rounds": 2})
    with caplog.at_level("WARNING", logger="chillfl.runner"):
        out = run_experiment(config, write=False, progress=False)
    assert all(r["skipped"] for r in out.records) and out.records[-1]["global_acc"] is not None
    assert [m for m in caplog.messages if m.startswith("no round trained: all 2 were skipped")]


def test_seed_bands_keep_the_rounds_one_seed_skipped() -> None:
    from chillfl.metrics.spread import seed_band

    # seed a skipped round 2 (its model is round 1's), seed b round 3; before, the band kept only rounds 1 and 4
    a = [{"round": 1, "global_acc": 0.2}, {"round": 2, "skipped": True}, {"round": 3, "global_acc": 0.4}, {"round": 4, "global_acc": 0.5}]
    b = [{"round": 1, "global_acc": 0.4}, {"round": 2, "global_acc": 0.6}, {"round": 3, "skipped": True}, {"round": 4, "global_acc": 0.7}]
    rounds, mean, _ = seed_band([a, b], "global_acc")
    assert rounds == [1, 2, 3, 4] and mean == pytest.approx([0.3, 0.4, 0.5, 0.6])
    # not carried: a local accuracy (nobody to measure), nor a round whose previous one was not evaluated (eval.every)
    local = [[{"round": 1, "local_acc": 0.2}, {"round": 2, "skipped": True}], [{"round": 1, "local_acc": 0.4}, {"round": 2, "local_acc": 0.6}]]
    assert seed_band(local, "local_acc")[0] == [1]
    sparse = [[{"round": 1}, {"round": 2, "skipped": True}, {"round": 3, "global_acc": 0.1}]]
    assert seed_band(sparse, "global_acc")[0] == [3]


def test_too_few_sampled_for_min_clients_is_not_redrawn() -> None:
    # 2 sampled, min_clients 3: no dropout redraw can make 3 report, so the round is skipped at once (it said attempts: 11)
    # with no draw made: nobody dropped out (it listed both as dropped, with attempts: 1)
    rules = FederationConfig(num_clients=6, clients_per_round=3, min_clients=3, on_too_few="retry", sampling="poisson")
    short = availability(1, 0, [2, 4], rules)
    assert short.skipped and short.attempts == 0 and short.dropped == []
    no_data = availability(1, 0, [1, 2, 4], rules, empty={1})  # one of three has no training rows
    assert no_data.skipped and no_data.attempts == 0 and no_data.dropped == [] and no_data.no_data == [1]
    enough = availability(1, 0, [1, 2, 4], rules)  # three could report: dropout 0 lets them, first attempt
    assert enough.reporting == [1, 2, 4] and enough.attempts == 1

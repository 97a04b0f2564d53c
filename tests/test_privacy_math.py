"""The DP mechanisms' maths against their papers, on values worked out by hand: DP-FedAvg's capped weights and fixed
denominator qW (McMahan et al. 2018), what each mechanism accounts and charges, the sigma ``target_epsilon`` asks for,
the ledger's worst unit, and the delta bound (refused at 1/n itself)."""

from __future__ import annotations

import math
from typing import Any, Sequence

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.clipping import gaussian_like
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.privacy.accounting import Ledger, epsilon_of
from chillfl.privacy.aggregate import PrivateAggregation
from chillfl.privacy.spec import Noise, Participant, RunSizes
from chillfl.seeds import derive_seed
from chillfl.training.local import batch_order

pytest.importorskip("opacus")

TINY: dict[str, Any] = {
    "seed": 3, "device": "cpu", "threads": 1, "dataset.name": "digits", "model.name": "mlp", "model.hidden": [16],
    "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 3, "client.epochs": 1,
    "client.batch_size": 32, "client.lr": 0.05, "eval.client_split_size": 20, "privacy.mechanism": "dp-fedavg",
    "privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.5, "privacy.delta": 1e-3,
}


def config(**over: Any) -> Any:
    return load_config(None, {**TINY, **over})


def _result(client_id: int, update: list[float]) -> ClientResult:
    return ClientResult(client_id, {"w": torch.tensor(update, dtype=torch.float64)}, 10, 1, 0.1, 1.0, 0.0)


# ---------------------------------------------------------------- DP-FedAvg's weights (McMahan et al. 2018, Algorithm 1)


def test_capped_weights_and_the_fixed_denominator_qw_by_hand() -> None:
    from chillfl.privacy.mechanisms.dp_fedavg import DpFedAvgOptions, aggregator, capped_weights

    # n = (10, 40, 100, 0), w_hat = 25: w = min(n / 25, 1) = (0.4, 1, 1, 0); W = 2.4; N = 4, m = 2: q = 0.5, qW = 1.2
    sizes = RunSizes(4, 2, 3, 32, 1, (10, 40, 100, 0))
    assert capped_weights(25.0, sizes.client_sizes) == (0.4, 1.0, 1.0, 0.0)
    assert capped_weights(0.0, sizes.client_sizes) is None  # 0: uniform
    agg = aggregator(DpFedAvgOptions(weight_cap=25.0), Noise(1.0, 2.0, sizes, 11), FedAvg())
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    # client 0: (3, 4), norm 5 -> clipped (0.6, 0.8), weighed 0.4 -> (0.24, 0.32); client 2: (0, 0.5) kept, weighed 1;
    # sum (0.24, 0.82) plus z ~ N(0, (sigma C)^2) = N(0, 4) (w_i <= 1: the sum's sensitivity stays C), over qW = 1.2
    out = agg.aggregate(glob, [_result(0, [3.0, 4.0]), _result(2, [0.0, 0.5])], round=5)
    z = gaussian_like(glob, 2.0, derive_seed(11, "privacy", "server", 5))["w"]
    assert torch.allclose(out["w"], (torch.tensor([0.24, 0.82], dtype=torch.float64) + z) / 1.2, atol=1e-12)
    # no noise: exactly (0.2, 0.68333...)
    quiet = aggregator(DpFedAvgOptions(weight_cap=25.0), Noise(1.0, 0.0, sizes, 11), FedAvg())
    flat = quiet.aggregate(glob, [_result(0, [3.0, 4.0]), _result(2, [0.0, 0.5])], round=5)
    assert torch.allclose(flat["w"], torch.tensor([0.2, 0.82 / 1.2], dtype=torch.float64), atol=1e-12)


def test_uniform_weights_divide_by_the_expected_clients_not_the_reporting_ones() -> None:
    # uniform (the default): qW = (m / N) N = m = 4 even though only one client reported; its clipped (0.6, 0.8) / 4
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=0.0, expected=4, seed=0)
    out = agg.aggregate({"w": torch.zeros(2, dtype=torch.float64)}, [_result(3, [3.0, 4.0])], round=0)
    assert torch.allclose(out["w"], torch.tensor([0.15, 0.2], dtype=torch.float64), atol=1e-12)


def test_weight_cap_runs_at_the_same_epsilon_and_is_validated() -> None:
    from chillfl.runner import run_experiment

    records = run_experiment(config(**{"privacy.weight_cap": 30.0}), write=False, progress=False).records
    # the weights change the estimate, not the budget: one step a round at q = 2/4, sigma = 1.5
    assert [r["epsilon"] for r in records] == pytest.approx([epsilon_of(((1.5, 0.5, t),), 1e-3) for t in (1, 2, 3)], rel=1e-12)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ConfigError) as err:
            config(**{"privacy.weight_cap": bad})
        assert err.value.field == "privacy.weight_cap"
    with pytest.raises(ConfigError) as err:  # dp-fedavg's own option
        config(**{"privacy.mechanism": "local", "privacy.weight_cap": 30.0})
    assert err.value.field == "privacy.weight_cap"


# ---------------------------------------------------------------- what each mechanism accounts and charges


def test_accounts_by_hand() -> None:
    from chillfl.privacy.mechanisms import dp_fedavg, dp_sgd, local

    # N = 5 clients of (100, 50, 33, 16, 0) samples, m = 2 a round, 10 rounds, batches of 16, 2 epochs
    sizes = RunSizes(5, 2, 10, 16, 2, (100, 50, 33, 16, 0))
    fedavg = dp_fedavg.accounts(dp_fedavg.DpFedAvgOptions(), sizes)
    assert fedavg.steps == ((0.4, 10),) and fedavg.delta_below == 0.2  # q = 2/5, one step a round; delta < 1/N
    sgd = dp_sgd.accounts(dp_sgd.DpSgdOptions(), sizes)
    # 100: ceil(100/16) = 7 batches (last of 4) x 2 epochs = 14 steps a round at q = 0.16; 50: 4 batches (last of 2), 8 at 0.32;
    # 33: 3 batches, the last of 1 sample merged into the one before -> 2 (16 and 17), 4 steps planned at the larger 17/33;
    # 16: one full batch, q = 1, 2 steps; the empty client none. Over 10 rounds; delta < 1/100 (the largest client: the unit is a sample)
    assert sgd.steps == ((0.16, 140), (0.32, 80), (17 / 33, 40), (1.0, 20))
    assert sgd.delta_below == 0.01
    assert local.accounts(local.LocalOptions(), sizes).steps == ((1.0, 10),)  # no amplification: each round a client takes part


def test_charges_by_hand() -> None:
    from chillfl.privacy.mechanisms import dp_fedavg, dp_sgd, local

    sizes = RunSizes(5, 2, 10, 16, 2, (100, 50, 33, 16, 0))
    round_ = [Participant(0, 0.5), Participant(2, 1.0)]  # client 0 a straggler at half its work; 1, 3, 4 not sampled
    assert [(c.unit, c.rate, c.steps) for c in dp_fedavg.charges(dp_fedavg.DpFedAvgOptions(), sizes, round_)] == [("clients", 0.4, 1)]
    # client 0: int(0.5 * 14) = 7 of its 14 steps at 0.16; client 2 all 4: each epoch a batch of 16 (16/33) and one of 17
    # (its 33rd sample merged in: 17/33); the others spend nothing
    assert [(c.unit, c.rate, c.steps) for c in dp_sgd.charges(dp_sgd.DpSgdOptions(), sizes, round_)] == [
        ("client 0", 0.16, 7), ("client 2", 16 / 33, 2), ("client 2", 17 / 33, 2)]
    assert [(c.unit, c.rate, c.steps) for c in local.charges(local.LocalOptions(), sizes, round_)] == [("client 0", 1.0, 1), ("client 2", 1.0, 1)]


@pytest.mark.parametrize(
    ("n", "b", "steps", "rates"),
    [
        (33, 16, 4, [(16 / 33, 2), (17 / 33, 2)]),  # k = 2: per epoch batches of 16 and 17; rates 16/33 + 17/33 = 1, each sample once
        (33, 16, 3, [(16 / 33, 2), (17 / 33, 1)]),  # a straggler's prefix of 3: epoch 1 whole (16, 17), then epoch 2's first 16
        (33, 16, 1, [(16 / 33, 1)]),  # only the first batch of 16: the merged one is each epoch's last
        (17, 16, 2, [(1.0, 2)]),  # k = 1: the merge makes one batch of all 17 samples: q = 1, no amplification (was 16/17)
        (7, 2, 6, [(2 / 7, 4), (3 / 7, 2)]),  # 7 = 3 x 2 + 1: batches 2, 2, 3 an epoch, 2 epochs; 2/7 + 2/7 + 3/7 = 1
        (5, 1, 4, [(0.2, 3), (0.4, 1)]),  # batch 1: the 5th single sample joins the 4th batch: 1, 1, 1, 2
        (34, 16, 6, [(16 / 34, 6)]),  # 34 = 2 x 16 + 2: a short last batch of 2 stays, charged at 16/34 (> 2/34: the safe side)
        (32, 16, 4, [(0.5, 4)]),  # full batches only
        (10, 16, 2, [(1.0, 2)]),  # one batch holds all
        (33, 16, 0, []),  # no step, no charge
    ],
)
def test_dp_sgd_step_rates_by_hand(n: int, b: int, steps: int, rates: list[tuple[float, int]]) -> None:
    # each step at the chance a given sample is in its batch, max(b, |batch|) / n (docs/privacy.md, "dp-sgd")
    from chillfl.privacy.mechanisms.dp_sgd import step_rates
    from chillfl.training.schedule import planned_steps

    assert step_rates(n, b, steps) == rates
    per_epoch = planned_steps(n, b, 1)
    if steps and steps % per_epoch == 0:  # whole epochs: the rates are the batch order's sizes
        order = batch_order(n, b, steps // per_epoch, torch.Generator().manual_seed(0))
        assert sorted((min(1.0, max(b, len(batch)) / n) for batch in order)) == sorted(q for q, k in rates for _ in range(k))


def test_dp_sgd_plans_each_client_at_its_largest_rate() -> None:
    # target_epsilon's sigma: every step at the client's largest rate (the merged batch's where there is one), on the safe side
    from chillfl.privacy.mechanisms.dp_sgd import largest_rate

    assert [largest_rate(n, 16) for n in (33, 17, 34, 32, 10)] == [17 / 33, 1.0, 16 / 34, 0.5, 1.0]
    assert largest_rate(5, 1) == 0.4 and largest_rate(7, 2) == 3 / 7


def test_the_ledger_reports_the_worst_unit_and_absent_ones_spend_nothing() -> None:
    ledger = Ledger(1e-3)
    ledger.spend("client 0", 1.5, 0.5, 3)
    ledger.spend("client 1", 1.5, 0.5, 1)
    ledger.spend("client 0", 1.5, 0.5, 2)  # merged: 5 steps
    assert ledger.histories == {"client 0": ((1.5, 0.5, 5),), "client 1": ((1.5, 0.5, 1),)}
    assert ledger.epsilon("client 2") == 0.0
    assert ledger.epsilon() == epsilon_of(((1.5, 0.5, 5),), 1e-3) > ledger.epsilon("client 1")


@pytest.mark.parametrize(
    ("mechanism", "over", "sensitivity"),
    [("dp-fedavg", {}, 1.0), ("dp-sgd", {"client.batch_size": 16}, 1.0), ("local", {}, 2.0)],
)
def test_target_epsilon_asks_the_accountant_with_each_units_rate_and_steps(mechanism: str, over: dict[str, Any], sensitivity: float, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.privacy import build

    cfg = config(**{"privacy.mechanism": mechanism, "privacy.target_epsilon": 5.0, **over})
    data = build_experiment(cfg).data
    sizes = RunSizes(4, 2, 3, cfg.client.batch_size, 1, tuple(len(data.train_indices[c]) for c in range(4)))
    calls: list[tuple[float, float, float, int]] = []

    def fake(target: float, delta: float, rate: float, steps: int, kind: str = "rdp", orders: str = "opacus") -> float:
        calls.append((target, delta, rate, steps))
        return 1.0 + rate  # the largest rate asks the most here

    monkeypatch.setattr(build, "noise_for", fake)
    plan = build._plan.__wrapped__(cfg.privacy, "parameters", sizes, 0)  # type: ignore[attr-defined]
    expected = plan.spec.accounts(plan.options, sizes).steps
    assert calls == [(5.0, 1e-3, q, t) for q, t in expected]
    if mechanism == "dp-fedavg":
        assert expected == ((0.5, 3),)
    elif mechanism == "local":
        assert expected == ((1.0, 3),)  # (dp-sgd's per-client rates and steps: test_accounts_by_hand)
    # sigma: the largest the units need, times the sensitivity (local's replace-one: 2C); the ledger is charged sigma / sensitivity
    assert plan.noise_multiplier == pytest.approx(sensitivity * max(1.0 + q for q, _ in expected))
    assert plan.accounted_sigma == pytest.approx(max(1.0 + q for q, _ in expected))


@pytest.mark.parametrize(("written", "unused"), [(1.5, True), (1.0, False), (0.0, False)])
def test_target_epsilon_says_the_sigma_it_picked(written: float, unused: bool, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # the resolved config keeps noise_multiplier as written, so the sigma that ran was said nowhere; now one info line
    # gives it, and names a written noise_multiplier it replaces (1.0 is the default and 0 the documented "pick it")
    from chillfl.privacy import build

    cfg = config(**{"privacy.target_epsilon": 5.0, "privacy.noise_multiplier": written})
    sizes = RunSizes(4, 2, 3, cfg.client.batch_size, 1, (10, 10, 10, 10))
    monkeypatch.setattr(build, "noise_for", lambda *args, **kwargs: 2.5)  # the accountant's answer: sigma = 1 (add/remove) x 2.5
    with caplog.at_level("INFO", logger="chillfl.privacy.build"):
        plan = build._plan.__wrapped__(cfg.privacy, "parameters", sizes, 0)  # type: ignore[attr-defined]
        build.say_sigma(cfg.privacy, plan, sizes.rounds)  # said by the build's plan, not the cached one
    lines = [r.getMessage() for r in caplog.records if r.name == "chillfl.privacy.build"]
    assert plan.noise_multiplier == 2.5
    assert len(lines) == 1 and "privacy.target_epsilon = 5 at delta = 0.001 over the planned 3 rounds: noise_multiplier (sigma) = 2.5" in lines[0]
    assert ("in place of the written noise_multiplier = 1.5" in lines[0]) == unused


@pytest.mark.parametrize(("over", "bound"), [({}, 0.25), ({"privacy.mechanism": "dp-sgd"}, None)])
def test_delta_at_one_over_n_itself_is_refused(over: dict[str, Any], bound: float | None) -> None:
    # delta must be < 1/n, not <= : dp-fedavg 1/N = 1/4; dp-sgd 1/n of the largest client
    cfg = config(**over)
    largest = max(len(rows) for rows in build_experiment(cfg).data.train_indices)
    delta = bound if bound is not None else 1 / largest
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{**over, "privacy.delta": delta}))
    assert err.value.field == "privacy.delta"
    build_experiment(config(**{**over, "privacy.delta": delta * 0.99}))  # just below: accepted


def test_a_weight_above_one_is_refused() -> None:
    # w_i <= 1 is what keeps the weighted sum's sensitivity at C
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=0, weights=(0.5, 1.5))


# ---------------------------------------------------------------- the accountant against published values and by hand


def _log_binomial_a(alpha: int, q: float, sigma: float) -> float:
    """log A_alpha of the Poisson-subsampled Gaussian (sensitivity 1, noise sigma) at an integer order, add/remove
    neighbours: A_alpha = sum_k C(alpha, k) (1 - q)^(alpha - k) q^k exp((k^2 - k) / (2 sigma^2)) (Mironov, Talwar & Zhang
    2019, Sec. 3.3), summed in log space. Written here from the paper, independent of Opacus's code."""
    terms = [
        math.lgamma(alpha + 1) - math.lgamma(k + 1) - math.lgamma(alpha - k + 1) + (alpha - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma**2)
        for k in range(alpha + 1)
    ]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def _integer_order_epsilon(sigma: float, q: float, steps: int, delta: float, orders: Sequence[int] = range(12, 64)) -> float:
    """(epsilon, delta) over integer orders (Opacus's 12..63 by default): steps x log(A_alpha) / (alpha - 1), converted by
    Balle et al. 2020, Thm 21 (eps = rdp - (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha))."""
    return min(
        steps * _log_binomial_a(a, q, sigma) / (a - 1) - (math.log(delta) + math.log(a)) / (a - 1) + math.log((a - 1) / a) for a in orders
    )


# Published: Opacus's own test (opacus/tests/accountants_test.py, test_rdp_accountant: sigma 1.5, q 0.04, 90 epochs =
# 2250 steps, delta 1e-5 -> 7.32911117143, to 1e-11 there), TF-Privacy's (compute_dp_sgd_privacy_test.py, Test0:
# n 60000, batch 150, sigma 1.3, 15 epochs -> 6000 steps at q 0.0025, delta 1e-5 -> 0.7242234026109595 at order 19;
# Test1: n 1e5, batch 100, sigma 1.0, 30 epochs -> 30000 steps at q 0.001, delta 1e-7 -> 1.4154988495444845 at order
# 13). Same bound, same orders where the optimum lies, same conversion: they agree to float rounding, hence rel 1e-9.
@pytest.mark.parametrize(
    ("sigma", "q", "steps", "delta", "epsilon"),
    [(1.5, 0.04, 2250, 1e-5, 7.32911117143), (1.3, 150 / 60000, 6000, 1e-5, 0.7242234026109595), (1.0, 100 / 100000, 30000, 1e-7, 1.4154988495444845)],
)
def test_rdp_epsilon_matches_opacus_and_tf_privacy_published_values(sigma: float, q: float, steps: int, delta: float, epsilon: float) -> None:
    assert epsilon_of(((sigma, q, steps),), delta) == pytest.approx(epsilon, rel=1e-9)


@pytest.mark.parametrize(("sigma", "q", "steps", "delta"), [(1.3, 150 / 60000, 6000, 1e-5), (1.0, 100 / 100000, 30000, 1e-7), (4.0, 0.01, 100, 1e-5)])
def test_rdp_epsilon_matches_the_binomial_expansion_where_the_best_order_is_an_integer(sigma: float, q: float, steps: int, delta: float) -> None:
    # Where the best order is >= 12, Opacus's grid there is the integers 12..63, so its minimum is the integer-order one
    # computed in this file from the paper's closed form; they agree to float rounding (log-space sums of ~60 terms): rel 1e-9.
    # (4.0, 0.01, 100): Abadi et al.'s MNIST "large noise" sigma and lot rate, 100 steps: the best order is the largest, 63.
    assert epsilon_of(((sigma, q, steps),), delta) == pytest.approx(_integer_order_epsilon(sigma, q, steps, delta), rel=1e-9)


def test_a_target_epsilon_below_the_rdp_floor_is_refused_without_opacus_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # at zero RDP the conversion still leaves min_a log((a-1)/a) - (log delta + log a)/(a-1): at delta 1e-3 that is, at a = 63,
    # log(62/63) + (log 1000 - log 63) / 62 = -0.015999 + 0.044590 = 0.028590; no sigma reaches a target at or below it, and
    # Opacus's own search would double sigma to 1e6 first (minutes at q = 0.5): refused at once, Opacus never asked
    import opacus.accountants.utils as utils

    from chillfl.privacy import accounting

    def searched(**kwargs: Any) -> float:
        raise AssertionError("Opacus's search ran for an unreachable target")

    monkeypatch.setattr(utils, "get_noise_multiplier", searched)
    with pytest.raises(ValueError, match="too low"):
        accounting.noise_for(0.02, 1e-3, 0.5, 3)
    monkeypatch.undo()
    noise_for, rdp_floor = accounting.noise_for, accounting.rdp_floor
    assert rdp_floor(1e-3) == pytest.approx(math.log(62 / 63) + (math.log(1000) - math.log(63)) / 62, rel=1e-12)
    assert rdp_floor(1e-3) == pytest.approx(0.028590, abs=1e-6)
    sigma = noise_for(rdp_floor(1e-3) + 0.05, 1e-3, 1.0, 1)  # just above: reachable, Opacus's search finds it (q = 1: closed form, fast)
    assert epsilon_of(((sigma, 1.0, 1),), 1e-3) <= rdp_floor(1e-3) + 0.05


def test_the_sigma_search_runs_once_per_question_in_a_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # the search is a pure function of (target, delta, q, steps, accountant, orders); under PRV it takes seconds, and
    # every seed of a comparison under user-level DP (q = clients_per_round / num_clients) asked it again
    import opacus.accountants.utils as utils

    from chillfl.privacy import accounting

    asked: list[dict[str, Any]] = []
    monkeypatch.setattr(utils, "get_noise_multiplier", lambda **kwargs: asked.append(kwargs) or 1.0 + len(asked))
    monkeypatch.setattr(accounting, "_prv_search", lambda target, delta, q, steps, tolerance, most: asked.append({"steps": steps, "accountant": "prv"}) or 1.0 + len(asked))
    accounting._searched.cache_clear()
    try:
        first = [accounting.noise_for(3.25, 1e-4, 0.3, 7, "prv") for _ in range(3)]
        other = accounting.noise_for(3.25, 1e-4, 0.3, 8, "prv")  # one more step: another question
        rdp = accounting.noise_for(3.25, 1e-4, 0.3, 7, "rdp")  # another accountant: another question
    finally:
        accounting._searched.cache_clear()  # the fake's answers stay in no later test
    assert first == [2.0, 2.0, 2.0] and (other, rdp) == (3.0, 4.0)
    assert [(a["steps"], a["accountant"]) for a in asked] == [(7, "prv"), (8, "prv"), (7, "rdp")]


def test_an_unreachable_target_epsilon_is_one_line_on_its_field() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"privacy.target_epsilon": 0.02}))  # q = 2/4 = 0.5, below the floor 0.0286 at delta 1e-3
    assert err.value.field == "privacy.target_epsilon" and "too low" in str(err.value)
    # the line says what to change: a larger target or delta, or (Opacus's orders) a grid or accountant with a lower floor
    assert err.value.message.endswith("; raise target_epsilon or delta, or rdp_orders = 'extended' or accountant = 'prv' (lower floors)")
    with pytest.raises(ConfigError) as err:  # under the PRV accountant there is no lower floor to point to
        build_experiment(config(**{"privacy.target_epsilon": 0.005, "privacy.accountant": "prv"}))  # below its floor 0.0090 at delta 1e-3
    assert err.value.message.endswith("; raise target_epsilon or delta")


# ---------------------------------------------------------------- rdp_orders = "extended": dp-accounting's orders, up to 1024

EXTENDED_INTEGERS = [*range(11, 64), 128, 256, 512, 1024]
"""The integer orders of the extended grid (google/differential-privacy dp_accounting's DEFAULT_RDP_ORDERS: 1.1 .. 10.9
by 0.1, 11 .. 63, 128, 256, 512, 1024)."""


@pytest.mark.parametrize(("sigma", "q", "steps", "delta", "opacus", "extended"), [(4.0, 0.01, 100, 1e-5, 0.12404, 0.08971), (8.0, 0.01, 10, 1e-5, 0.10337, 0.01276)])
def test_extended_orders_give_a_smaller_epsilon_where_the_best_order_is_past_63(sigma: float, q: float, steps: int, delta: float, opacus: float, extended: float) -> None:
    # (4.0, 0.01, 100): Abadi et al.'s "large noise" sigma and lot rate over 100 steps: Opacus's best order is its last, 63
    # (0.124); dp-accounting's grid goes on to 128 (0.0897, the 0.090 it reports). (8.0, 0.01, 10): its best order is 512.
    # The best order is an integer either way, so the minimum is the binomial expansion's over the grid's integers,
    # written in this file from the paper: rel 1e-9 (log-space sums of up to ~500 terms, lgamma to ~1e-15)
    narrow, wide = epsilon_of(((sigma, q, steps),), delta), epsilon_of(((sigma, q, steps),), delta, orders="extended")
    assert (narrow, wide) == pytest.approx((opacus, extended), abs=1e-5)
    assert wide < narrow
    assert wide == pytest.approx(_integer_order_epsilon(sigma, q, steps, delta, EXTENDED_INTEGERS), rel=1e-9)
    ledger = Ledger(delta, orders="extended")
    ledger.spend("clients", sigma, q, steps)
    assert ledger.epsilon() == wide


def test_extended_orders_change_nothing_where_the_best_order_is_below_63() -> None:
    # Opacus's published case (best order 3.9): the extended grid holds every order of Opacus's, so the minimum is the same number
    history = ((1.5, 0.04, 2250),)
    assert epsilon_of(history, 1e-5, orders="extended") == epsilon_of(history, 1e-5) == pytest.approx(7.32911117143, rel=1e-9)


def test_the_rdp_floor_moves_with_the_orders() -> None:
    # the extended grid's last order, 1024: log(1023/1024) - (log 1e-5 + log 1024) / 1023 = -0.000977 + 0.004479 = 0.003501
    # (Opacus's, at 63: 0.1029); at delta 1e-3 it is below zero (-0.0010), so every positive target is within reach
    from chillfl.privacy.accounting import noise_for, rdp_floor

    assert rdp_floor(1e-5, "extended") == pytest.approx(math.log(1023 / 1024) - (math.log(1e-5) + math.log(1024)) / 1023, rel=1e-12)
    assert rdp_floor(1e-5, "extended") == pytest.approx(0.003501, abs=1e-6) and rdp_floor(1e-5) == pytest.approx(0.102867, abs=1e-6)
    assert rdp_floor(1e-3, "extended") < 0
    with pytest.raises(ValueError, match="too low"):  # 0.05 < 0.103: Opacus's orders cannot reach it ...
        noise_for(0.05, 1e-5, 1.0, 1)
    sigma = noise_for(0.05, 1e-5, 1.0, 1, "rdp", "extended")  # ... the extended grid can (q = 1: the closed form, fast)
    assert epsilon_of(((sigma, 1.0, 1),), 1e-5, orders="extended") <= 0.05
    with pytest.raises(ValueError, match="too low"):  # at or below the extended floor: refused as before
        noise_for(0.0035, 1e-5, 1.0, 1, "rdp", "extended")


def test_a_run_accounts_with_the_chosen_orders() -> None:
    # sigma 50 at q = 0.5, delta 1e-3: the best order is past 63, so the record's epsilon is the extended grid's, smaller
    over = {"privacy.noise_multiplier": 50.0, "federation.rounds": 1}
    from chillfl.runner import run_experiment

    wide = run_experiment(config(**over, **{"privacy.rdp_orders": "extended"}), write=False, progress=False).records
    assert wide[0]["epsilon"] == epsilon_of(((50.0, 0.5, 1),), 1e-3, orders="extended") < epsilon_of(((50.0, 0.5, 1),), 1e-3)


def test_rdp_orders_is_refused_with_the_prv_accountant() -> None:
    with pytest.raises(ConfigError) as err:
        config(**{"privacy.accountant": "prv", "privacy.rdp_orders": "extended"})
    assert err.value.field == "privacy.rdp_orders" and "RDP accountant" in err.value.message
    with pytest.raises(ConfigError) as err:
        config(**{"privacy.rdp_orders": "dp-accounting"})
    assert err.value.field == "privacy.rdp_orders"


# ---------------------------------------------------------------- the PRV accountant's floor


def test_an_unreachable_prv_target_is_refused_before_any_accountant_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    # Opacus's PRV accountant reports its estimate at delta' = delta - delta/1000 plus eps_error = 0.01, and no privacy curve
    # goes below log(1 - delta') at delta': at delta 1e-3 nothing under 0.01 + log(1 - 0.000999) = 0.0090005 is reported.
    # Opacus's search would try sigma = 20, 40, ..., 1.3e6 (17 evaluations, each up to a minute at q = 0.5) before saying so
    import opacus.accountants.utils as utils
    from opacus.accountants.analysis.prv.prvs import DiscretePRV

    # Every PRV evaluation ends in DiscretePRV.compute_epsilon: Opacus's get_epsilon and the ledger's own composition alike.
    evaluations = []
    real = DiscretePRV.compute_epsilon
    monkeypatch.setattr(DiscretePRV, "compute_epsilon", lambda self, *a, **k: evaluations.append(1) or real(self, *a, **k))

    def searched(**kwargs: Any) -> float:
        raise AssertionError("Opacus's search ran for an unreachable target")

    monkeypatch.setattr(utils, "get_noise_multiplier", searched)
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"privacy.accountant": "prv", "privacy.target_epsilon": 0.005}))  # q = 0.5, 3 rounds
    assert err.value.field == "privacy.target_epsilon" and "PRV accountant reports epsilon > 0.009001" in err.value.message
    assert "\n" not in str(err.value) and evaluations == []
    epsilon_of(((1.0, 0.01, 10),), 1e-5, "prv")  # the spy sees an evaluation when there is one
    assert evaluations
    from chillfl.privacy.accounting import prv_floor

    assert prv_floor(1e-3) == pytest.approx(0.01 + math.log(1 - 0.999e-3), rel=1e-12)


def test_the_prv_floor_is_what_the_prv_accountant_reports_at_huge_noise_and_the_rdp_floor_is_no_bound_for_it() -> None:
    from chillfl.privacy.accounting import noise_for, prv_floor, rdp_floor

    # sigma 655360 (Opacus's last doubling that may succeed), q 0.01, 100 steps: the report sits on the floor (to float rounding)
    assert epsilon_of(((655360.0, 0.01, 100),), 1e-5, "prv") == pytest.approx(prv_floor(1e-5), abs=1e-9)
    # the RDP floor (0.103 at 1e-5) would refuse targets the PRV accountant reaches: it is not used for PRV
    assert epsilon_of(((640.0, 0.01, 100),), 1e-5, "prv") < 0.011 < rdp_floor(1e-5)
    sigma = noise_for(0.0125, 1e-5, 0.01, 100, "prv")  # just above the PRV floor: Opacus's search finds a sigma
    assert epsilon_of(((sigma, 0.01, 100),), 1e-5, "prv") <= 0.0125


# ---------------------------------------------------------------- adaptive clipping: TF-Privacy's clamp of the noised fraction


def test_clamp_fraction_by_hand() -> None:
    from chillfl.privacy.aggregate import AdaptiveClip

    # gamma 0.5, eta 0.2, C_t = 1. A noised fraction of 1.7 (above 1): unclamped, C_{t+1} = exp(-0.2 (1.7 - 0.5)) = exp(-0.24);
    # clamped to 1, exp(-0.2 (1 - 0.5)) = exp(-0.1). A fraction of -0.4: exp(0.18) unclamped, exp(0.1) clamped to 0. Inside [0, 1] both agree
    paper, tf = AdaptiveClip(0.5, 0.2, 1.0), AdaptiveClip(0.5, 0.2, 1.0, clamp=True)
    assert (paper.next_clip(1.0, 1.7), tf.next_clip(1.0, 1.7)) == pytest.approx((math.exp(-0.24), math.exp(-0.1)), rel=1e-15)
    assert (paper.next_clip(1.0, -0.4), tf.next_clip(1.0, -0.4)) == pytest.approx((math.exp(0.18), math.exp(0.1)), rel=1e-15)
    assert paper.next_clip(2.0, 0.3) == tf.next_clip(2.0, 0.3) == 2.0 * math.exp(-0.2 * (0.3 - 0.5))


def test_clamp_fraction_changes_the_next_clip_norm_when_the_count_noise_pushes_the_fraction_out() -> None:
    from chillfl.privacy.aggregate import AdaptiveClip

    # two clients, m = 2: norms 5 (clipped, b = 0) and 0.5 (b = 1): centred bits sum to 0; sigma_b = 10, e the round's count draw
    # (seed 11, round 0: e = 0.756): fraction (0 + 10 e) / 2 + 1/2 = 4.28, far above 1. Unclamped C_1 = exp(-0.2 (4.28 - 0.5)),
    # clamped exp(-0.2 (1 - 0.5)) = exp(-0.1); the server noise (std sigma_u C) is the same draw either way
    e = torch.randn((), generator=torch.Generator().manual_seed(derive_seed(11, "privacy", "count", 0)), dtype=torch.float64).item()
    fraction = 10 * e / 2 + 0.5
    assert fraction > 1
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    outs, norms = [], []
    for clamp in (False, True):
        agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=11, adaptive=AdaptiveClip(0.5, 0.2, 10.0, clamp))
        outs.append(agg.aggregate(glob, [_result(0, [3.0, 4.0]), _result(1, [0.0, 0.5])], round=0)["w"])
        norms.append(agg.clip_norm)
    assert norms == pytest.approx([math.exp(-0.2 * (fraction - 0.5)), math.exp(-0.1)], rel=1e-12)
    assert torch.equal(outs[0], outs[1])


def test_clamp_fraction_reaches_the_aggregator_and_is_adaptive_clippings() -> None:
    from chillfl.privacy.mechanisms.dp_fedavg import DpFedAvgOptions, aggregator

    noise = Noise(1.0, 1.5, RunSizes(4, 2, 3, 32, 1, (10,) * 4), 0)
    built = aggregator(DpFedAvgOptions(target_quantile=0.5, count_noise=1.5, clamp_fraction=True), noise, FedAvg())
    assert isinstance(built, PrivateAggregation) and built.adaptive is not None and built.adaptive.clamp
    default = aggregator(DpFedAvgOptions(target_quantile=0.5, count_noise=1.5), noise, FedAvg())
    assert isinstance(default, PrivateAggregation) and default.adaptive is not None and not default.adaptive.clamp
    with pytest.raises(ConfigError) as err:
        config(**{"privacy.clamp_fraction": True})  # fixed clipping: no fraction to clamp
    assert err.value.field == "privacy.clamp_fraction"
    with pytest.raises(ConfigError) as err:
        config(**{"privacy.mechanism": "local", "privacy.clamp_fraction": True})
    assert err.value.field == "privacy.clamp_fraction" and "dp-fedavg" in err.value.message


# ---------------------------------------------------------------- DP-FedAvg's ClipFn: FlatClip or PerLayerClip (McMahan et al. 2018)


def test_per_layer_clipping_by_hand() -> None:
    from chillfl.clipping import clip_per_layer

    # k = 2 entries, C = 1: each entry's budget S_j = C / sqrt(2) = 0.7071068 (sqrt(S_0^2 + S_1^2) = C).
    # a = (3, 4), norm 5 > 0.7071068: scaled by 0.7071068 / 5 to (0.4242641, 0.5656854); b = (0.3, 0.4), norm 0.5: kept.
    # The whole then has norm sqrt(0.5 + 0.25) = 0.8660 <= C. (FlatClip would scale both by 1 / sqrt(25.25): b to (0.0597, 0.0796).)
    out, scaled = clip_per_layer({"a": torch.tensor([3.0, 4.0]), "b": torch.tensor([0.3, 0.4])}, 1.0)
    assert scaled
    assert torch.allclose(out["a"], torch.tensor([0.4242641, 0.5656854]), atol=1e-6) and torch.allclose(out["b"], torch.tensor([0.3, 0.4]))
    # every entry within its budget: nothing scaled
    same, scaled = clip_per_layer({"a": torch.tensor([0.0, 0.5]), "b": torch.tensor([0.1, 0.0])}, 1.0)
    assert not scaled and torch.equal(same["a"], torch.tensor([0.0, 0.5])) and torch.equal(same["b"], torch.tensor([0.1, 0.0]))


def test_dp_fedavg_per_layer_aggregate_by_hand() -> None:
    # global 0; client 0 sends a = (3, 4), b = (0.3, 0.4): per layer (0.4242641, 0.5656854) and (0.3, 0.4) (above);
    # client 1 sends a = (0, 0.5), b = (0.1, 0): within budget. sigma = 0, fixed denominator m = 2:
    # a = (0.4242641 + 0, 0.5656854 + 0.5) / 2 = (0.2121320, 0.5328427); b = (0.3 + 0.1, 0.4 + 0) / 2 = (0.2, 0.2); one of two clipped
    glob = {"a": torch.zeros(2, dtype=torch.float64), "b": torch.zeros(2, dtype=torch.float64)}

    def sent(cid: int, a: list[float], b: list[float]) -> ClientResult:
        return ClientResult(cid, {"a": torch.tensor(a, dtype=torch.float64), "b": torch.tensor(b, dtype=torch.float64)}, 10, 1, 0.1, 1.0, 0.0)

    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=0, per_layer=True)
    out = agg.aggregate(glob, [sent(0, [3.0, 4.0], [0.3, 0.4]), sent(1, [0.0, 0.5], [0.1, 0.0])], round=0)
    assert torch.allclose(out["a"], torch.tensor([0.2121320, 0.5328427], dtype=torch.float64), atol=1e-7)
    assert torch.allclose(out["b"], torch.tensor([0.2, 0.2], dtype=torch.float64), atol=1e-12)
    assert agg.round_metrics()["clipped"] == 0.5
    with pytest.raises(ValueError, match="per-layer"):
        from chillfl.privacy.aggregate import AdaptiveClip

        PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=0, per_layer=True, adaptive=AdaptiveClip(0.5, 0.2, 1.0))


def test_per_layer_clipping_runs_at_flat_clippings_epsilon_and_is_fixed_clippings_only() -> None:
    from chillfl.runner import run_experiment

    flat = run_experiment(config(), write=False, progress=False).records
    layered = run_experiment(config(**{"privacy.clipping": "per_layer"}), write=False, progress=False).records
    # the whole update stays within C either way: the same one step a round at q = 2/4, sigma = 1.5
    assert [r["epsilon"] for r in layered] == [r["epsilon"] for r in flat] == pytest.approx([epsilon_of(((1.5, 0.5, t),), 1e-3) for t in (1, 2, 3)], rel=1e-12)
    assert layered[-1]["global_loss"] != flat[-1]["global_loss"]
    with pytest.raises(ConfigError) as err:
        config(**{"privacy.clipping": "per_layer", "privacy.target_quantile": 0.5})
    assert err.value.field == "privacy.clipping"

"""DP-FedAvg releases the noise alone in a round nobody reported (McMahan et al. 2018, Algorithm 1), through a capability
the round loop asks (``ReleasesEmptyRounds``, ``AggregatesNobody``); every other protocol and mechanism still skips it."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import pytest
import torch

from chillfl.aggregation.base import FedAvg
from chillfl.aggregation.fedopt import FedOpt, FedOptOptions
from chillfl.config import FederationConfig, load_config
from chillfl.engine.loop import availability, run_rounds
from chillfl.engine.protocol import ClientReply, ClientTask
from chillfl.engine.record import RoundRecord
from chillfl.experiment import build_experiment, build_protocol
from chillfl.privacy.aggregate import PrivateAggregation
from chillfl.privacy.mechanisms.dp_fedavg import skipped_mass
from chillfl.runner import run_experiment
from chillfl.seeds import derive_seed
from test_privacy import TINY as PRIVATE  # the private runs' base: seed 3, digits, an MLP, 4 clients, dp-fedavg

pytest.importorskip("opacus")

TINY: dict[str, Any] = {  # seed 3, q = 1/4 under Poisson: rounds draw [1], [1], nobody
    **PRIVATE, "federation.clients_per_round": 1, "federation.sampling": "poisson"}

GLOBAL = {"w": torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64), "b": torch.tensor([0.25], dtype=torch.float64)}


def normal(seed: int, like: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """N(0, 1) draws from the stream seeded ``seed``, entry after entry in ``like``'s order (the server noise's stream, at std 1)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen, dtype=torch.float64) for k, v in like.items()}


# ---------------------------------------------------------------- the aggregator, by hand


def test_nobody_reporting_releases_w_plus_z_over_qw() -> None:
    # sigma = 0.5, C = 2: z ~ N(0, 1) on the sum; weights (0.5, 1, 0.5, 1), m = 2: qW = 2 * 0.75 = 1.5; new = w + z / 1.5
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=2.0, noise_multiplier=0.5, expected=2, seed=7, weights=(0.5, 1.0, 0.5, 1.0))
    assert agg.aggregates_nobody()
    out = agg.aggregate(GLOBAL, [], round=3)
    z = normal(derive_seed(7, "privacy", "server", 3), GLOBAL)  # the round's server-noise stream, std sigma C = 1
    for k in GLOBAL:
        assert torch.allclose(out[k], GLOBAL[k] + z[k] / 1.5, rtol=0, atol=1e-12), k
    assert agg.round_metrics() == {"clipped": 0.0}


def test_nobody_reporting_under_the_clipped_estimator() -> None:
    # f_c: W = 4 (uniform, m = 4), w_min_share 0.25: q W_min = 4 * 0.25 = 1 = the denominator (no weight reported);
    # the noise on the mean has std 2 sigma C / (q W_min) = 2 * 2 * 1 / 1 = 4
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=2.0, expected=4, seed=11, w_min_share=0.25)
    out = agg.aggregate(GLOBAL, [], round=0)
    z = normal(derive_seed(11, "privacy", "server", 0), GLOBAL)
    for k in GLOBAL:
        assert torch.allclose(out[k], GLOBAL[k] + 4.0 * z[k], rtol=0, atol=1e-12), k


def test_fedadam_takes_its_step_on_the_noise_only_mean() -> None:
    # FedAdam's first step on Delta = z / qW (qW = m = 2, sigma C = 1): m = (1 - b1) Delta, v = b2 tau^2 + (1 - b2) Delta^2,
    # w' = w + eta m / (sqrt(v) + tau)
    o = FedOptOptions(server_lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
    agg = PrivateAggregation(FedOpt("adam", o), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=5)
    out = agg.aggregate(GLOBAL, [], round=4)
    z = normal(derive_seed(5, "privacy", "server", 4), GLOBAL)
    for k in GLOBAL:
        delta = z[k] / 2
        m = 0.1 * delta
        v = 0.99 * 1e-6 + 0.01 * delta**2
        assert torch.allclose(out[k], GLOBAL[k] + 0.1 * m / (v.sqrt() + 1e-3), rtol=0, atol=1e-12), k
        assert not torch.allclose(out[k], GLOBAL[k] + delta)  # the step, not the plain mean


def test_client_noise_releases_nothing_without_clients() -> None:
    local = PrivateAggregation(FedAvg(), client_noise=True, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=5)
    assert not local.aggregates_nobody()


def test_adaptive_clipping_releases_the_counts_noise_alone() -> None:
    # no bit: b = N(0, sigma_b^2) / m + 1/2; C' = C exp(-eta (b - gamma))
    from chillfl.privacy.aggregate import AdaptiveClip

    rule = AdaptiveClip(quantile=0.5, lr=0.2, count_noise=1.0)
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=11, adaptive=rule)
    agg.aggregate(GLOBAL, [], round=2)
    gen = torch.Generator().manual_seed(derive_seed(11, "privacy", "count", 2))
    b = float(torch.randn((), generator=gen, dtype=torch.float64)) / 2 + 0.5
    assert agg.clip_norm == pytest.approx(math.exp(-0.2 * (b - 0.5)), rel=1e-12)


# ---------------------------------------------------------------- who reports: the first draw decides


def test_a_first_draw_with_nobody_reporting_is_released_not_retried() -> None:
    # seed 0, dropout 0.5, clients 0-3: the availability stream's first uniforms are, round 7, 0.361 0.380 0.120 0.191
    # (all drop), round 6, 0.362 0.253 0.488 0.712 (client 3 alone reports), round 0, 0.790 0.581 ... (nobody drops),
    # round 1, 0.597 0.031 ... (the second drops)
    rules = FederationConfig(num_clients=4, clients_per_round=4, min_clients=2, dropout=0.5, on_too_few="retry")
    released = availability(0, 7, [0, 1, 2, 3], rules, release=True)
    assert released.nobody and released.reporting == [] and released.dropped == [0, 1, 2, 3] and released.attempts == 1
    retried = availability(0, 7, [0, 1, 2, 3], rules)  # a protocol that releases nothing: redrawn, as before
    assert not retried.nobody and retried.attempts > 1
    few = availability(0, 6, [0, 1, 2, 3], rules, release=True)  # 1 of min_clients = 2: retried either way
    assert not few.nobody and few == availability(0, 6, [0, 1, 2, 3], rules) and few.attempts > 1
    # fewer sampled than min_clients = 3: the first draw only says whether nobody reports (round 7) or some do (round 0)
    three = FederationConfig(num_clients=4, clients_per_round=4, min_clients=3, dropout=0.5, on_too_few="retry")
    assert availability(0, 7, [2, 3], three, release=True).nobody
    some = availability(0, 0, [2, 3], three, release=True)
    assert not some.nobody and some.skipped and some.dropped == [] and some.attempts == 1  # the draw dropped neither
    # round 1's uniforms are 0.597 0.031: client 3 drops, and that draw's drops are what the skipped round records
    one = availability(0, 1, [2, 3], three, release=True)
    assert not one.nobody and one.skipped and one.dropped == [3] and one.attempts == 1
    assert availability(0, 0, [], three, release=True).nobody  # Poisson drew nobody


class _Protocol:
    """A server protocol that moves a counter every round it runs; ``release``: it runs a round nobody reported."""

    def __init__(self, release: bool | None) -> None:
        self.release = release
        self.runs: list[tuple[int, int]] = []
        if release is not None:
            self.releases_empty_rounds = lambda: self.release

    client = None

    def configure(self, round: int, sampled: Sequence[int]) -> list[ClientTask[Any, Any]]:
        return [ClientTask(c, round, None, None) for c in sampled]  # type: ignore[arg-type]

    def server_update(self, round: int, tasks: Sequence[ClientTask[Any, Any]], replies: Sequence[ClientReply[Any, Any]]) -> RoundRecord:
        self.runs.append((round, len(replies)))
        return RoundRecord(round + 1, [t.client_id for t in tasks], metrics={"ran": True})


class _Executor:
    def __init__(self) -> None:
        self.calls = 0

    def map(self, tasks: Sequence[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
        self.calls += 1
        return [ClientReply(t.client_id, None) for t in tasks]


@pytest.mark.parametrize("release", [None, False, True])
def test_the_loop_asks_the_protocol(release: bool | None) -> None:
    # seed 1, Poisson at q = 2/6: rounds draw [0, 1, 5], [1], nobody (tests/test_poisson_sampling.py)
    protocol, executor = _Protocol(release), _Executor()
    rules = FederationConfig(num_clients=6, clients_per_round=2, sampling="poisson")
    records = list(run_rounds(protocol, executor, seed=1, num_clients=6, clients_per_round=2, rounds=3, participation=rules))  # type: ignore[arg-type]
    assert [r["clients"] for r in records] == [[0, 1, 5], [1], []] and executor.calls == 2
    if release:
        assert protocol.runs == [(0, 3), (1, 1), (2, 0)]
        assert records[2] == {"round": 3, "clients": [], "ran": True, "sampled": [], "dropped": [], "nobody_reported": True, "attempts": 0}
    else:  # no capability, or one that says no: skipped, as before
        assert protocol.runs == [(0, 3), (1, 1)]
        assert records[2] == {"round": 3, "clients": [], "sampled": [], "dropped": [], "skipped": True, "attempts": 0}


# ---------------------------------------------------------------- whole runs


def test_a_dp_fedavg_run_releases_its_empty_round() -> None:
    out = run_experiment(load_config(None, TINY), write=False, progress=False)
    records = out.records
    assert [r["clients"] for r in records] == [[1], [1], []]
    last = records[2]
    assert last["nobody_reported"] is True and "skipped" not in last and "train_loss" not in last and "local_acc" not in last
    assert last["sampled"] == [] and last["dropped"] == [] and last["attempts"] == 0
    assert last["global_loss"] != records[1]["global_loss"]  # evaluated on the moved model, not carried
    assert out.summary["final_global_acc"] == last["global_acc"]
    # the model: the one after round 2 (a 2-round run draws the same) plus z / qW, qW = m = 1, sigma C = 1.5
    before = run_experiment(load_config(None, {**TINY, "federation.rounds": 2}), write=False, progress=False).model_state
    assert out.model_state is not None and before is not None
    z = normal(derive_seed(3, "privacy", "server", 2), before)
    for k, v in before.items():
        assert torch.allclose(out.model_state[k], (v.double() + 1.5 * z[k]).to(v.dtype), rtol=0, atol=1e-6), k


@pytest.mark.parametrize("over", [{"privacy.mechanism": "local"}, {"privacy.mechanism": "dp-sgd"}, {"privacy.mechanism": "none"}])
def test_other_mechanisms_still_skip(over: dict[str, Any]) -> None:
    exp = build_experiment(load_config(None, {**TINY, **over}))
    assert not build_protocol(exp).releases_empty_rounds()  # type: ignore[attr-defined]


def test_the_attack_wrapper_keeps_the_release() -> None:
    exp = build_experiment(load_config(None, {**TINY, "attack.kind": "scaling", "attack.clients": [1]}))
    assert build_protocol(exp).releases_empty_rounds()  # type: ignore[attr-defined]


def test_dropout_emptied_rounds_under_fixed_sampling_are_released_and_charged() -> None:
    records = run_experiment(load_config(None, {**TINY, "federation.sampling": "fixed", "federation.dropout": 0.5}), write=False, progress=False).records
    empty = [r for r in records if not r["clients"]]
    assert empty and all(r["nobody_reported"] and "skipped" not in r and "epsilon" in r for r in empty)
    assert [r["epsilon"] for r in records] == sorted(r["epsilon"] for r in records)  # each round one more step


# ---------------------------------------------------------------- delta's term


def test_skipped_mass_counts_only_rounds_with_some_but_too_few() -> None:
    # 3 other clients each in at 1/2: P[0] = 1/8, P[1] = 3/8, P[2] = 3/8; the zero case is released, so not counted
    assert skipped_mass(10, 3, 0.5, 1) == 0.0
    assert skipped_mass(10, 3, 0.5, 2) == pytest.approx(10 * 3 / 8)
    assert skipped_mass(10, 3, 0.5, 3) == pytest.approx(10 * 6 / 8)
    assert skipped_mass(100, 99, 0.1, 2) == pytest.approx(100 * 99 * 0.1 * 0.9**98)  # N = 100, q = 0.1: 3.1e-2 over 100 rounds


def test_the_delta_warning_is_gone_for_min_clients_1(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING"):  # 4 clients at q = 1/4, min_clients 1: a round draws nobody w.p. 0.42, now released
        build_experiment(load_config(None, TINY))
    assert not any("privacy.delta" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING"):  # min_clients 2 at q = 1/2: P[exactly 1 of the 3 others] = 3/8 a round, over 3 rounds
        build_experiment(load_config(None, {**TINY, "federation.clients_per_round": 2, "federation.min_clients": 2}))
    assert sum("privacy.delta" in r.getMessage() for r in caplog.records) == 1


def test_a_run_whose_every_round_was_released_without_clients_says_so(caplog: pytest.LogCaptureFixture) -> None:
    # seed 1, 6 clients, q = 1/6: nobody in either round (tests/test_poisson_sampling.py); dp-fedavg releases both, so the
    # results are not the initial model's (the warning said they were)
    config = load_config(None, {**TINY, "seed": 1, "federation.num_clients": 6, "federation.rounds": 2})
    with caplog.at_level("WARNING", logger="chillfl.runner"):
        out = run_experiment(config, write=False, progress=False)
    assert all(r["nobody_reported"] and not r["clients"] for r in out.records)
    assert [m for m in caplog.messages if m.startswith("no round trained: in all 2 nobody, or too few, reported; the results are the initial model moved")]
    assert not [m for m in caplog.messages if "were skipped" in m]


def test_seed_bands_do_not_carry_a_noise_only_round() -> None:
    from chillfl.metrics.spread import measured

    # the model moved in round 2: not evaluated there (eval.every), it has no value, as a round that trained
    records = [{"round": 1, "global_acc": 0.2}, {"round": 2, "clients": [], "nobody_reported": True}, {"round": 3, "global_acc": 0.3}]
    assert measured(records, "global_acc") == {1: 0.2, 3: 0.3}

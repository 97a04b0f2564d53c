"""[privacy]: clipping, noise scale, DP-FedAvg / local aggregation worked by hand, the accountant against an
independent computation, bad budgets refused, a digits run's growing epsilon, reporting, resume bitwise."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.privacy.accounting import Ledger, add_steps, epsilon_of
from chillfl.privacy.aggregate import PrivateAggregation
from chillfl.clipping import clip_update, gaussian_like
from chillfl.report.compare import format_table
from chillfl.runner import run_experiment
from chillfl.seeds import derive_seed

sys.path.insert(0, str(Path(__file__).parent))
from resume_cases import check_resume  # noqa: E402

pytest.importorskip("opacus")

TINY: dict[str, Any] = {
    "seed": 3,
    "device": "cpu",
    "threads": 1,
    "dataset.name": "digits",
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 4,
    "federation.clients_per_round": 4,
    "federation.rounds": 3,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "eval.client_split_size": 20,
    "privacy.mechanism": "dp-fedavg",
    "privacy.clip_norm": 1.0,
    "privacy.noise_multiplier": 1.5,
    "privacy.delta": 1e-3,
}


def config(**over: Any) -> Any:
    return load_config(None, {**TINY, **over})


# ---------------------------------------------------------------- clipping and noise


def test_clip_update_by_hand() -> None:
    # u = ([3], [4]) over two entries: ||u|| = sqrt(9 + 16) = 5; C = 1 -> u * 1/5 = (0.6, 0.8)
    clipped, norm = clip_update({"a": torch.tensor([3.0]), "b": torch.tensor([4.0])}, 1.0)
    assert norm == 5.0
    assert clipped["a"].item() == pytest.approx(0.6) and clipped["b"].item() == pytest.approx(0.8)
    # C = 10 > 5: unchanged
    same, _ = clip_update({"a": torch.tensor([3.0]), "b": torch.tensor([4.0])}, 10.0)
    assert same["a"].item() == 3.0 and same["b"].item() == 4.0


def test_noise_scale_and_seed() -> None:
    like = {"w": torch.zeros(200_000)}
    a, b = gaussian_like(like, 0.3, 7), gaussian_like(like, 0.3, 7)
    assert torch.equal(a["w"], b["w"])  # same seed, same noise
    assert not torch.equal(a["w"], gaussian_like(like, 0.3, 8)["w"])
    # std of 200000 draws of N(0, 0.3^2): 0.3 within 1 % (the sample std's relative s.e. is 1/sqrt(2n) = 0.16 %)
    assert a["w"].std().item() == pytest.approx(0.3, rel=0.01)
    assert abs(a["w"].mean().item()) < 0.01


def _results(*models: list[float]) -> list[ClientResult]:
    return [ClientResult(i, {"w": torch.tensor(m, dtype=torch.float64)}, 10 * (i + 1), 1, 0.1, 1.0, 0.0) for i, m in enumerate(models)]


def test_dp_fedavg_aggregate_by_hand() -> None:
    # global w = (0, 0); client updates (3, 4) (norm 5) and (0, 0.5) (norm 0.5); C = 1:
    # clipped (0.6, 0.8) and (0, 0.5); sum (0.6, 1.3); fixed denominator m = 4 (clients_per_round):
    # w' = ((0.6, 1.3) + z) / 4, z ~ N(0, (sigma C)^2) from the round's server stream; the sample counts play no part.
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=2.0, expected=4, seed=11)
    out = agg.aggregate(glob, _results([3.0, 4.0], [0.0, 0.5]), round=5)
    z = gaussian_like(glob, 2.0 * 1.0, derive_seed(11, "privacy", "server", 5))["w"]
    expected = (torch.tensor([0.6, 1.3], dtype=torch.float64) + z) / 4
    assert torch.allclose(out["w"], expected, atol=1e-12)
    assert agg.round_metrics()["clipped"] == 0.5  # one of two clients was clipped


def test_dp_fedavg_clipped_estimator_by_hand() -> None:
    # McMahan et al.'s f_c: sum_i w_i clip(u_i) / max(q W_min, sum_i w_i reporting), noise std 2 sigma C / (q W_min) on that mean.
    # Same updates as above, clipped sum (0.6, 1.3); sigma = 2, C = 1, m = 4 (uniform: qW = 4).
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    seed = derive_seed(11, "privacy", "server", 5)
    n01 = gaussian_like(glob, 1.0, seed)["w"]  # the round's standard normal draw
    # W_min = W / 4: q W_min = 1 < 2 reporting, so divide by 2; noise std 2 * 2 * 1 / 1 = 4
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=2.0, expected=4, seed=11, w_min_share=0.25)
    out = agg.aggregate(glob, _results([3.0, 4.0], [0.0, 0.5]), round=5)
    assert torch.allclose(out["w"], torch.tensor([0.3, 0.65], dtype=torch.float64) + 4 * n01, atol=1e-12)
    # W_min = W: q W_min = 4 > 2, divide by 4 (f_f's denominator) with twice f_f's noise: std 2 * 2 * 1 / 4 = 1
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=2.0, expected=4, seed=11, w_min_share=1.0)
    out = agg.aggregate(glob, _results([3.0, 4.0], [0.0, 0.5]), round=5)
    assert torch.allclose(out["w"], torch.tensor([0.15, 0.325], dtype=torch.float64) + 1 * n01, atol=1e-12)
    # weights (0.5, 1, 1, 0.5): W = 3, qW = 4 * 3/4 = 3, W_min = W / 4: q W_min = 0.75; reporting weight 0.5 + 1 = 1.5;
    # sum 0.5 (0.6, 0.8) + (0, 0.5) = (0.3, 0.9), divided by 1.5 = (0.2, 0.6); noise std 2 * 2 * 1 / 0.75 = 16/3
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=2.0, expected=4, seed=11, weights=(0.5, 1.0, 1.0, 0.5), w_min_share=0.25)
    out = agg.aggregate(glob, _results([3.0, 4.0], [0.0, 0.5]), round=5)
    assert torch.allclose(out["w"], torch.tensor([0.2, 0.6], dtype=torch.float64) + 16 / 3 * n01, atol=1e-12)


def test_clipped_estimator_runs_under_poisson_at_the_same_epsilon() -> None:
    over = {"federation.clients_per_round": 2, "federation.sampling": "poisson"}
    fixed = run_experiment(config(**over), write=False, progress=False).records
    clipped = run_experiment(config(**over, **{"privacy.estimator": "clipped", "privacy.w_min_share": 0.5}), write=False, progress=False).records
    assert [r["epsilon"] for r in clipped] == [r["epsilon"] for r in fixed]  # its noise is calibrated to its own sensitivity
    assert [r["clients"] for r in clipped] == [r["clients"] for r in fixed] and clipped[-1]["global_loss"] != fixed[-1]["global_loss"]


def test_local_aggregate_by_hand() -> None:
    # local: each client noises its own clipped update with its own stream; the server averages over the n = 2 reporting
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    agg = PrivateAggregation(FedAvg(), client_noise=True, clip_norm=1.0, noise_multiplier=0.5, expected=4, seed=11)
    out = agg.aggregate(glob, _results([3.0, 4.0], [0.0, 0.5]), round=2)
    z0 = gaussian_like(glob, 0.5, derive_seed(11, "privacy", "client", 2, 0))["w"]
    z1 = gaussian_like(glob, 0.5, derive_seed(11, "privacy", "client", 2, 1))["w"]
    expected = (torch.tensor([0.6, 0.8], dtype=torch.float64) + z0 + torch.tensor([0.0, 0.5], dtype=torch.float64) + z1) / 2
    assert torch.allclose(out["w"], expected, atol=1e-12)


@pytest.mark.parametrize("mechanism", ["dp-fedavg", "local"])
def test_forged_updates_are_clipped_with_the_rest_the_attack_wrapper_is_outermost(mechanism: str) -> None:
    # docs/attacks.md: the attack wrapper is outermost, so under either mechanism the server-side clip (and the
    # simulated client noise of local) also acts on what an attacker forged
    from chillfl.attacks.aggregate import AttackedAggregation
    from chillfl.settings.attack import AttackConfig

    scaling = AttackConfig.from_table({"kind": "scaling", "factor": 100.0}, "attack")
    exp = build_experiment(config(**{"privacy.mechanism": mechanism, "attack.kind": "scaling", "attack.clients": [1]}))
    assert isinstance(exp.aggregator, AttackedAggregation) and isinstance(exp.aggregator.base, PrivateAggregation)
    # by hand, sigma = 0: client 1 (the attacker) sends w + 100 (0.03, 0.04) = (3, 4), norm 5, clipped to C = 1: (0.6, 0.8);
    # client 0's (0.3, 0.4) has norm 0.5 and is kept; local's plain mean over n = 2: (0.45, 0.6)
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    private = PrivateAggregation(FedAvg(), client_noise=True, clip_norm=1.0, noise_multiplier=0.0, expected=2, seed=11)
    out = AttackedAggregation(private, scaling, frozenset({1}), 11).aggregate(glob, _results([0.3, 0.4], [0.03, 0.04]), round=0)
    assert torch.allclose(out["w"], torch.tensor([0.45, 0.6], dtype=torch.float64), atol=1e-12)


# ---------------------------------------------------------------- the accountant


ALPHAS = [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64))


def gaussian_epsilon(sigma: float, steps: int, delta: float) -> float:
    """Independent of Opacus's code: the Gaussian mechanism (q = 1) has RDP alpha / (2 sigma^2) at order alpha
    (Mironov 2017, Prop. 7); T steps compose to T alpha / (2 sigma^2); to (eps, delta) by Balle et al. 2020, Thm 21:
    eps = rdp - (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha), minimised over the same orders."""
    return min(steps * a / (2 * sigma**2) - (math.log(delta) + math.log(a)) / (a - 1) + math.log((a - 1) / a) for a in ALPHAS)


def test_accountant_matches_independent_gaussian() -> None:
    # sigma = 1.5, 3 steps, delta 1e-3: the order minimising the bound lies inside the grid
    assert epsilon_of(((1.5, 1.0, 3),), 1e-3) == pytest.approx(gaussian_epsilon(1.5, 3, 1e-3), rel=1e-9)
    assert epsilon_of((), 1e-3) == 0.0


def test_prv_accountant() -> None:
    # Opacus's PRV accountant on the same history: a valid, tighter epsilon for the Gaussian mechanism over 3 steps
    rdp, prv = epsilon_of(((1.5, 1.0, 3),), 1e-3, "rdp"), epsilon_of(((1.5, 1.0, 3),), 1e-3, "prv")
    assert 0 < prv < rdp


def test_ledger_history_and_state() -> None:
    h = add_steps(add_steps((), 1.0, 0.5, 2), 1.0, 0.5, 3)  # merged: same (sigma, q)
    assert h == ((1.0, 0.5, 5),)
    assert add_steps(h, 2.0, 0.5, 1) == ((1.0, 0.5, 5), (2.0, 0.5, 1))
    # into the entry of the same pair wherever it is (composition is order-free): a unit charged at two rates each round
    # (dp-sgd's merged last batch) keeps two entries, not two a round
    assert add_steps(add_steps(h, 1.0, 0.25, 1), 1.0, 0.5, 2) == ((1.0, 0.5, 7), (1.0, 0.25, 1))
    ledger = Ledger(1e-3)
    ledger.spend("client 0", 1.5, 1.0, 2)
    ledger.spend("client 1", 1.5, 1.0, 3)
    assert ledger.epsilon() == ledger.epsilon("client 1") > ledger.epsilon("client 0")  # the worst-off client
    again = Ledger(1e-3)
    again.load_state_dict(ledger.state_dict())
    assert again.histories == ledger.histories


def test_ledger_memo_keeps_only_the_histories_units_hold() -> None:
    """Every round grows each unit's history, so a memo of every history ever asked for grows with rounds x units; the
    run-wide ``epsilon()`` keeps only the histories some unit holds now (two units with one history share an entry)."""
    ledger = Ledger(1e-3)
    for _ in range(5):
        for unit in ("a", "b", "c"):
            ledger.spend(unit, 1.5, 0.5, 2 if unit == "c" else 1)
        first = ledger.epsilon()
        assert ledger.epsilon() == first  # memoised, and the same after pruning
    assert len(ledger._cache) == 2  # a and b: ((1.5, 0.5, 5),); c: ((1.5, 0.5, 10),)
    fresh = Ledger(1e-3)
    fresh.spend("c", 1.5, 0.5, 10)
    assert ledger.epsilon() == ledger.epsilon("c") == fresh.epsilon()  # pruned entries are not needed for the answer


@pytest.mark.parametrize("orders", ["opacus", "extended"])
def test_ledger_epsilon_is_opacus_accountant_bit_for_bit_with_one_step_rdp_computed_once(orders: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger composes each (sigma, q)'s one-step RDP itself (computed once a run): the epsilons are Opacus's
    RDPAccountant's (``epsilon_of``) exactly, for histories of one and of several entries, as they grow round by round."""
    from opacus.accountants.analysis import rdp as analysis

    calls: list[tuple[float, float, int]] = []
    real = analysis.compute_rdp

    def counted(*, q: float, noise_multiplier: float, steps: int, orders: object) -> object:
        calls.append((noise_multiplier, q, steps))
        return real(q=q, noise_multiplier=noise_multiplier, steps=steps, orders=orders)

    ledger = Ledger(1e-5, "rdp", orders)  # type: ignore[arg-type]
    monkeypatch.setattr(analysis, "compute_rdp", counted)
    for _ in range(3):  # rounds: two units share (1.1, 0.02); one adds a second pair
        ledger.spend("a", 1.1, 0.02, 7)
        ledger.spend("b", 1.1, 0.02, 5)
        ledger.spend("b", 0.8, 0.3, 2)
        mine = (ledger.epsilon("a"), ledger.epsilon("b"), ledger.epsilon())
        monkeypatch.setattr(analysis, "compute_rdp", real)  # Opacus's accountant, its own way
        theirs = tuple(epsilon_of(ledger.histories[u], 1e-5, "rdp", orders) for u in ("a", "b"))  # type: ignore[arg-type]
        monkeypatch.setattr(analysis, "compute_rdp", counted)
        assert mine == (*theirs, max(theirs))  # bit for bit
    assert ledger.histories["b"] == ((1.1, 0.02, 15), (0.8, 0.3, 6))  # each pair's steps in one entry (add_steps)
    assert sorted(calls) == [(0.8, 0.3, 1), (1.1, 0.02, 1)]  # one step's RDP per pair, once for the whole run


def test_prv_ledger_epsilon_is_opacus_prv_accountant_bit_for_bit_with_one_step_rdp_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The PRV ledger sizes Opacus's discretisation domain from the one-step RDPs it keeps (each pair's computed once a
    run, at Opacus's default orders, which the domain uses) and discretises a pair recurring in a history once: the
    epsilons are Opacus's PRVAccountant's (``epsilon_of``) exactly, as three units' histories grow over three rounds."""
    from opacus.accountants.analysis import rdp as analysis

    calls: list[tuple[float, float, int]] = []
    real = analysis.compute_rdp

    def counted(*, q: float, noise_multiplier: float, steps: int, orders: object) -> object:
        calls.append((noise_multiplier, q, steps))
        return real(q=q, noise_multiplier=noise_multiplier, steps=steps, orders=orders)

    ledger = Ledger(1e-5, "prv")
    monkeypatch.setattr(analysis, "compute_rdp", counted)
    for _ in range(3):  # rounds: "a" one pair; "b" two pairs alternating (one recurs in its history); "c" a full release (q = 1)
        ledger.spend("a", 1.1, 0.02, 7)
        ledger.spend("b", 1.1, 0.02, 5)
        ledger.spend("b", 0.8, 0.05, 2)
        ledger.spend("c", 2.0, 1.0)
        mine = (ledger.epsilon("a"), ledger.epsilon("b"), ledger.epsilon("c"), ledger.epsilon())
        monkeypatch.setattr(analysis, "compute_rdp", real)  # Opacus's accountant, its own way
        theirs = tuple(epsilon_of(ledger.histories[u], 1e-5, "prv") for u in ("a", "b", "c"))
        monkeypatch.setattr(analysis, "compute_rdp", counted)
        assert mine == (*theirs, max(theirs))  # bit for bit
    assert ledger.histories["c"] == ((2.0, 1.0, 3),)
    assert sorted(calls) == [(0.8, 0.05, 1), (1.1, 0.02, 1), (2.0, 1.0, 1)]  # one step's RDP per pair, once for the whole run


# ---------------------------------------------------------------- bad input, refused up front


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"privacy.clip_norm": 0.0}, "privacy.clip_norm"),
        ({"privacy.noise_multiplier": 0.0}, "privacy.noise_multiplier"),
        ({"privacy.delta": 1.0}, "privacy.delta"),
        ({"privacy.target_epsilon": -1.0}, "privacy.target_epsilon"),
        ({"privacy.estimator": "clipped", "privacy.w_min_share": 0.0}, "privacy.w_min_share"),
        ({"privacy.w_min_share": 0.5}, "privacy.w_min_share"),  # the clipped estimator's option, under the fixed one
        ({"privacy.estimator": "median"}, "privacy.estimator"),
    ],
)
def test_bad_values_refused(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        config(**over)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"privacy.delta": 0.3}, "privacy.delta"),  # >= 1/num_clients = 0.25: the unit is a client
        ({"privacy.target_epsilon": 1e-4}, "privacy.target_epsilon"),  # unreachable over 3 rounds at any sigma Opacus tries
        ({"algorithm.name": "krum", "federation.num_clients": 8, "federation.clients_per_round": 8, "privacy.delta": 1e-3}, "privacy.mechanism"),  # no weighted mean
        ({"prototypes": {"method": "fedproto"}}, "privacy.mechanism"),  # prototype protocol not covered
    ],
)
def test_impossible_budgets_refused(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**over))
    assert err.value.field == field


# ---------------------------------------------------------------- end to end


def test_digits_dp_fedavg_epsilon_grows_and_matches() -> None:
    records = run_experiment(config(), write=False, progress=False).records
    eps = [r["epsilon"] for r in records]
    assert all(math.isfinite(e) for e in eps)
    assert eps[0] < eps[1] < eps[2]
    # every client every round: q = 4/4 = 1, so round t's epsilon is the plain Gaussian mechanism's over t steps
    for t, e in enumerate(eps, 1):
        assert e == pytest.approx(gaussian_epsilon(1.5, t, 1e-3), rel=1e-9)
    again = run_experiment(config(), write=False, progress=False).records
    assert again == records  # same seed, same noise


def test_subsampled_epsilon_below_full_participation() -> None:
    # q = 2/4: privacy amplification by subsampling: a smaller epsilon than q = 1 at the same sigma and rounds
    sub = run_experiment(config(**{"federation.clients_per_round": 2}), write=False, progress=False).records
    full = gaussian_epsilon(1.5, 3, 1e-3)
    assert 0 < sub[-1]["epsilon"] < full


def test_local_epsilon_per_client() -> None:
    records = run_experiment(config(**{"privacy.mechanism": "local"}), write=False, progress=False).records
    # every client reports every round, q = 1 each: the worst client's epsilon is the Gaussian mechanism's over t rounds;
    # local DP's neighbours are any two clipped updates (sensitivity 2C), so sigma = 1.5 is charged as 0.75
    assert [r["epsilon"] for r in records] == pytest.approx([gaussian_epsilon(0.75, t, 1e-3) for t in (1, 2, 3)], rel=1e-9)
    removed = run_experiment(config(**{"privacy.mechanism": "local", "privacy.adjacency": "add_remove"}), write=False, progress=False).records
    assert [r["epsilon"] for r in removed] == pytest.approx([gaussian_epsilon(1.5, t, 1e-3) for t in (1, 2, 3)], rel=1e-9)
    assert [r["global_acc"] for r in removed] == [r["global_acc"] for r in records]  # the same noise: only its accounting differs


def test_local_target_epsilon_doubles_the_noise_for_replace_one() -> None:
    # the same target spends the same epsilon under both relations; replace-one needs twice the noise for it
    target = {"privacy.mechanism": "local", "privacy.target_epsilon": 8.0}
    from chillfl.privacy.build import plan_privacy

    replace, removed = (plan_privacy(c, build_experiment(c).data) for c in (config(**target), config(**target, **{"privacy.adjacency": "add_remove"})))
    assert replace is not None and removed is not None
    assert replace.noise_multiplier == 2 * removed.noise_multiplier and replace.accounted_sigma == removed.noise_multiplier


def test_replace_adjacency_is_refused_for_subsampled_mechanisms() -> None:
    for mechanism in ("dp-fedavg", "dp-sgd"):
        with pytest.raises(ConfigError) as err:
            config(**{"privacy.mechanism": mechanism, "privacy.adjacency": "replace"})
        assert err.value.field == "privacy.adjacency"


# Independent references (dp-accounting 0.6.0's RdpAccountant over the same orders, and Opacus's own RDP
# accountant, agreed to 1e-4 on these): the Poisson-subsampled Gaussian, composed and converted to (eps, delta).
@pytest.mark.parametrize(
    ("sigma", "q", "steps", "delta", "epsilon"),
    [(1.1, 0.01, 10000, 1e-5, 5.6320), (1.0, 0.01, 1000, 1e-5, 2.10137), (2.0, 1.0, 50, 1e-5, 22.0199)],
)
def test_subsampled_accountant_against_reference_values(sigma: float, q: float, steps: int, delta: float, epsilon: float) -> None:
    assert epsilon_of(((sigma, q, steps),), delta) == pytest.approx(epsilon, rel=1e-4)


def test_dp_fedavg_charges_one_step_a_round_at_the_client_rate() -> None:
    # 2 of 4 clients a round: q = 0.5, one step each round (not one per client, not q = 1)
    records = run_experiment(config(**{"federation.clients_per_round": 2}), write=False, progress=False).records
    assert [r["epsilon"] for r in records] == pytest.approx([epsilon_of(((1.5, 0.5, t),), 1e-3) for t in (1, 2, 3)], rel=1e-12)


def test_dp_sgd_charges_each_local_step_at_the_batch_rate() -> None:
    # dp-sgd: client k spends every local step at q_k = b / n_k; 4 of 4 clients a round, 2 epochs of batches of 16
    from chillfl.training.schedule import planned_steps

    cfg = config(**{"privacy.mechanism": "dp-sgd", "client.batch_size": 16, "client.epochs": 2})
    sizes = [len(rows) for rows in build_experiment(cfg).data.train_indices]
    records = run_experiment(cfg, write=False, progress=False).records
    for t, record in enumerate(records, 1):
        worst = max(epsilon_of(((1.5, 16 / n, t * planned_steps(n, 16, 2)),), 1e-3) for n in sizes)
        assert record["epsilon"] == pytest.approx(worst, rel=1e-12)
    assert all(16 / n < 1 for n in sizes)  # the check above is one of subsampling


def test_dp_sgd_charges_a_merged_last_batch_at_its_own_rate() -> None:
    # the clients hold (550, 142, 334, 412) samples; at batches of 47, client 1's 142 = 3 x 47 + 1 trains each epoch on
    # batches of 47, 47 and 48 (the trailing sample merged): 2 steps at 47/142 and 1 at 48/142 an epoch, the rates summing
    # to 1 as each sample is used once (not 3 at 47/142 = 0.993). It has the fewest samples, so it is the worst-off client.
    cfg = config(**{"privacy.mechanism": "dp-sgd", "client.batch_size": 47, "client.epochs": 2})
    assert [len(rows) for rows in build_experiment(cfg).data.train_indices] == [550, 142, 334, 412]
    records = run_experiment(cfg, write=False, progress=False).records
    for t, record in enumerate(records, 1):
        assert record["epsilon"] == pytest.approx(epsilon_of(((1.5, 47 / 142, 4 * t), (1.5, 48 / 142, 2 * t)), 1e-3), rel=1e-12)
    assert epsilon_of(((1.5, 47 / 142, 4 * 3), (1.5, 48 / 142, 2 * 3)), 1e-3) > epsilon_of(((1.5, 47 / 142, 6 * 3),), 1e-3)  # what was reported before


def test_dp_sgd_a_client_of_batch_size_plus_one_is_the_gaussian_mechanism() -> None:
    # 17 samples at batches of 16: the 17th is merged in, so each epoch is one batch of all 17, q = 1 (no amplification):
    # t rounds of 2 epochs are 2t Gaussian steps, by the accountant-free formula above (it was charged q = 16/17 before)
    from chillfl.privacy.mechanisms.dp_sgd import DpSgdOptions, charges
    from chillfl.privacy.spec import Participant, RunSizes

    sizes = RunSizes(2, 2, 3, 16, 2, (17, 100))
    ledger = Ledger(1e-3)
    for t in (1, 2, 3):
        for c in charges(DpSgdOptions(), sizes, [Participant(0, 1.0)]):
            ledger.spend(c.unit, 1.5, c.rate, c.steps)
        assert ledger.histories["client 0"] == ((1.5, 1.0, 2 * t),)
        assert ledger.epsilon("client 0") == pytest.approx(gaussian_epsilon(1.5, 2 * t, 1e-3), rel=1e-9)


@pytest.mark.parametrize(
    ("algorithm", "mechanism", "sends"),
    [("fedgen", "dp-fedavg", "label counts"), ("fedgen", "local", "label counts"), ("fedgen", "dp-sgd", "label counts"),
     ("qffl", "dp-sgd", "loss F_k"), ("pa3fed", "dp-sgd", "score and gradient norm")],
)
def test_methods_whose_clients_send_more_than_their_model_are_refused(algorithm: str, mechanism: str, sends: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"algorithm.name": algorithm, "privacy.mechanism": mechanism, "temperature.policy": "none"}))
    assert err.value.field == "privacy.mechanism" and sends in err.value.message and "without noise" in err.value.message


def test_a_plugins_declared_reports_are_refused_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "reports_plugin.py").write_text(
        "from chillfl.aggregation.base import FedAvg\n"
        "from chillfl.capabilities import Capabilities\n\n\n"
        "class HistogramAvg(FedAvg):\n"
        "    capabilities = Capabilities(takes_weights=True, reports=\"each client's class histogram\")\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        for mechanism in ("dp-fedavg", "local"):
            with pytest.raises(ConfigError) as err:
                build_experiment(config(**{"algorithm.name": "reports_plugin:HistogramAvg", "privacy.mechanism": mechanism}))
            assert err.value.field == "privacy.mechanism" and "outside epsilon, each client's class histogram" in err.value.message
    finally:
        sys.modules.pop("reports_plugin", None)


def test_target_epsilon_spends_the_budget() -> None:
    records = run_experiment(config(**{"privacy.target_epsilon": 8.0}), write=False, progress=False).records
    # Opacus's search stops within epsilon_tolerance = 0.01 below the target
    assert 8.0 - 0.011 <= records[-1]["epsilon"] <= 8.0


def test_the_summary_records_the_noise_the_run_used(tmp_path: Path) -> None:
    """``target_epsilon``'s sigma is in ``summary.json`` (before: said on stderr alone, and ``config.toml`` keeps the
    unused ``noise_multiplier``); the local mechanism's accounted sigma is half of it (replace-one, sensitivity 2C)."""
    import json

    from chillfl.privacy.build import plan_privacy

    for over, sensitivity in (({"privacy.target_epsilon": 8.0}, 1.0), ({"privacy.mechanism": "local", "privacy.target_epsilon": 8.0}, 2.0)):
        cfg = config(**over, out_dir=str(tmp_path))
        plan = plan_privacy(cfg, build_experiment(cfg).data)
        assert plan is not None and plan.noise_multiplier != cfg.privacy.noise_multiplier
        out = run_experiment(cfg, progress=False)
        assert out.folder is not None
        said = json.loads((out.folder / "summary.json").read_text())["privacy"]
        assert said == {"mechanism": cfg.privacy.mechanism, "noise_multiplier": plan.noise_multiplier, "accounted_sigma": plan.noise_multiplier / sensitivity,
                        "clip_norm": 1.0, "delta": 1e-3, "accountant": "rdp"}
    plain = run_experiment(load_config(None, {**{k: v for k, v in TINY.items() if not k.startswith("privacy.")}, "out_dir": str(tmp_path)}), progress=False)
    assert plain.folder is not None and "privacy" not in json.loads((plain.folder / "summary.json").read_text())


def test_compare_table_has_epsilon_column() -> None:
    row = {"variant": "dp", "final_acc": 0.5, "delta_acc": 0.0, "best_acc": 0.5, "final_loss": 1.0, "final_local_acc": None,
           "rounds_to_target": 1, "speedup": None, "target": 0.5, "epsilon": 3.25}
    table = format_table([row, {**row, "variant": "plain", "epsilon": None}], "dp", "dp")
    assert "| epsilon |" in table.splitlines()[1]
    assert table.splitlines()[3].endswith(" 3.250 |") and table.splitlines()[4].endswith(" - |")


@pytest.mark.parametrize("mechanism", ["dp-fedavg", "local"])
def test_resume_bitwise(mechanism: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the noise streams are pure functions of (seed, round, client); the ledger is in the checkpoint
    check_resume("algorithm.fedavg", "sequential", 1, tmp_path, monkeypatch,
                 **{"privacy.mechanism": mechanism, "privacy.delta": 1e-3, "privacy.noise_multiplier": 1.2})


@pytest.mark.parametrize(("method", "stop"), [("algorithm.fedavg", 1), ("algorithm.fedavg", 2), ("algorithm.fedadam", 2)])
def test_poisson_resume_bitwise(method: str, stop: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # seed 5, q = 2/10: rounds draw [3, 5, 7], nobody, [3, 4]; round 2 releases the noise alone, is charged, and checkpointed
    # (stop 2) or rerun (stop 1); FedAdam's moments took its step on it
    check_resume(method, "sequential", stop, tmp_path, monkeypatch,
                 **{"privacy.mechanism": "dp-fedavg", "privacy.delta": 1e-3, "privacy.noise_multiplier": 1.2, "federation.sampling": "poisson"})
    import json

    (metrics,) = [p for p in tmp_path.glob("*/metrics.jsonl") if p.parent.name.startswith("ref")]
    second = json.loads(metrics.read_text().splitlines()[1])
    assert second["clients"] == [] and second["nobody_reported"] is True and "skipped" not in second and "epsilon" in second


def test_poisson_dp_fedavg_charges_every_round_skipped_or_not() -> None:
    # seed 3, q = 1/4: rounds draw [1], [1], nobody. The sampled Gaussian mechanism releases every round (noise alone when
    # nobody is in), so round t's epsilon is t steps at (sigma 1.5, q 0.25), the noise-only round 3 included
    records = run_experiment(config(**{"federation.clients_per_round": 1, "federation.sampling": "poisson"}), write=False, progress=False).records
    assert [r["clients"] for r in records] == [[1], [1], []] and records[2]["nobody_reported"]
    assert [r["epsilon"] for r in records] == pytest.approx([epsilon_of(((1.5, 0.25, t),), 1e-3) for t in (1, 2, 3)], rel=1e-12)
    # a skipped round (1 of min_clients = 2 reporting) is charged too: seed 3, q = 2/4, dropout 0.5
    skips = run_experiment(config(**{"federation.clients_per_round": 2, "federation.min_clients": 2, "federation.dropout": 0.5,
                                     "federation.sampling": "poisson"}), write=False, progress=False).records
    assert any(r.get("skipped") for r in skips)
    assert [r["epsilon"] for r in skips] == pytest.approx([epsilon_of(((1.5, 0.5, t),), 1e-3) for t in (1, 2, 3)], rel=1e-12)
    # fixed-size sampling (the approximation) charges only the rounds that ran, as before (a round too few reported: skipped)
    fixed = run_experiment(config(**{"federation.clients_per_round": 2, "federation.min_clients": 2, "federation.dropout": 0.5}),
                           write=False, progress=False).records
    assert any(r.get("skipped") for r in fixed)
    assert all("epsilon" not in r for r in fixed if r.get("skipped"))


def test_skipped_mass_by_hand_and_its_warning(caplog: pytest.LogCaptureFixture) -> None:
    from chillfl.privacy.mechanisms.dp_fedavg import _warn_skips, skipped_mass

    # 10 rounds, 3 other clients each in at 1/2: P[none] = 1/8 (released: not counted), P[1] = 3/8
    assert skipped_mass(10, 3, 0.5, 1) == 0.0 and skipped_mass(10, 3, 0.5, 2) == pytest.approx(3.75)
    assert skipped_mass(100, 99, 0.1, 2) == pytest.approx(100 * 99 * 0.1 * 0.9**98)  # N = 100, q = 0.1: 3.1e-2, far above delta = 1e-5
    with caplog.at_level("WARNING"):  # 4 clients at q = 1/2, min_clients 2: exactly 1 of the 3 others w.p. 3/8 a round
        build_experiment(config(**{"federation.clients_per_round": 2, "federation.min_clients": 2, "federation.sampling": "poisson"}))
    said = [r.getMessage() for r in caplog.records if "privacy.delta" in r.getMessage()]
    assert len(said) == 1 and "; at least 2 x 1.12 >= 1, so it holds no guarantee at all (" in said[0]  # 3 rounds x 3/8
    caplog.clear()
    with caplog.at_level("WARNING"):  # 1 round, 99 others at q = 0.1: 3.1e-4, above delta = 1e-5 but a guarantee still
        _warn_skips(1, 100, 10, 0.0, 2, 1e-5)
    assert len(caplog.records) == 1 and "no guarantee" not in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level("WARNING"):  # fixed-size sampling: the approximation, no such term
        build_experiment(config(**{"federation.clients_per_round": 1}))
    assert not any("privacy.delta" in r.getMessage() for r in caplog.records)


def test_no_privacy_writes_no_epsilon() -> None:
    records = run_experiment(config(**{"privacy.mechanism": "none"}), write=False, progress=False).records
    assert all("epsilon" not in r for r in records)
    assert np.isfinite(records[-1]["train_loss"])


# ---------------------------------------------------------------- soft-label rows (local)


def test_row_clipping_by_hand() -> None:
    from chillfl.privacy.softlabels import RowNoise

    # logits (3, 4): L2 norm 5, C = 1 -> (0.6, 0.8); (0.3, 0.4): norm 0.5, kept. sigma = 0: no noise.
    l2 = RowNoise(1.0, 0.0, "l2", 0, probabilities=False).release(torch.tensor([[3.0, 4.0], [0.3, 0.4]]), 0, 0)
    assert torch.allclose(l2, torch.tensor([[0.6, 0.8], [0.3, 0.4]]))
    # L1: (3, 1) has L1 norm 4, C = 1 -> (0.75, 0.25)
    l1 = RowNoise(1.0, 0.0, "l1", 0, probabilities=False).release(torch.tensor([[3.0, 1.0]]), 0, 0)
    assert torch.allclose(l1, torch.tensor([[0.75, 0.25]]))
    # noise: N(0, (sigma C)^2) from the (seed, round, client) stream; probability rows go back to the simplex
    rows = torch.full((500, 10), 0.1)
    noisy = RowNoise(1.0, 0.5, "l2", 3, probabilities=False).release(rows, 2, 7)
    assert (noisy - rows).std().item() == pytest.approx(0.5, rel=0.05)  # 5000 draws: s.e. of the std 1 %
    simplex = RowNoise(1.0, 0.5, "l2", 3).release(rows, 2, 7)
    assert (simplex >= 0).all() and torch.allclose(simplex.sum(1), torch.ones(500))
    assert torch.equal(simplex, RowNoise(1.0, 0.5, "l2", 3).release(rows, 2, 7))  # same seed, same noise


SOFT = {"distillation": {"method": "dsfl", "public_size": 60, "subset_size": 20}, "privacy.mechanism": "local", "privacy.noise_multiplier": 2.0}


def test_soft_label_epsilons() -> None:
    records = run_experiment(config(**SOFT), write=False, progress=False).records
    # every client uploads every round (4 of 4), 20 requested rows each: per row one Gaussian release a round,
    # the whole upload 20 a round; q = 1 throughout; replace-one rows (sensitivity 2C): sigma = 2 is charged as 1
    assert [r["epsilon"] for r in records] == pytest.approx([gaussian_epsilon(1.0, t, 1e-3) for t in (1, 2, 3)], rel=1e-9)
    assert [r["epsilon_upload"] for r in records] == pytest.approx([gaussian_epsilon(1.0, 20 * t, 1e-3) for t in (1, 2, 3)], rel=1e-9)
    plain = run_experiment(config(**{**SOFT, "privacy.mechanism": "none"}), write=False, progress=False).records
    assert plain[-1]["train_loss"] != records[-1]["train_loss"]  # the noised rows changed what was distilled


def test_a_soft_label_method_that_selects_its_rows_from_its_data_is_refused() -> None:
    # Selective-FD's clients choose which public samples to label by a density estimate of their own data: un-noised
    selective = {**SOFT, "distillation": {"method": "selective_fd", "public_size": 60, "subset_size": 20}}
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**selective))
    assert err.value.field == "privacy.mechanism" and "which public samples each client labels" in err.value.message


def test_soft_labels_refuse_server_mechanisms() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{**SOFT, "privacy.mechanism": "dp-fedavg"}))
    assert err.value.field == "privacy.mechanism"


def test_soft_label_resume_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check_resume("distillation.scarlet", "sequential", 1, tmp_path, monkeypatch,
                 **{"privacy.mechanism": "local", "privacy.noise_multiplier": 2.0, "privacy.delta": 1e-3})


def test_seed_table_has_epsilon_column() -> None:
    from types import SimpleNamespace

    from chillfl.report.compare import build_seed_rows, format_seed_table

    def run(acc: float, eps: float | None) -> Any:
        record = {"round": 1, "global_acc": acc, **({} if eps is None else {"epsilon": eps})}
        return SimpleNamespace(records=[record], summary={"final_global_acc": acc, "best_global_acc": acc})

    dp, plain = SimpleNamespace(label="dp"), SimpleNamespace(label="plain")
    runs = {("dp", 0): run(0.5, 2.0), ("dp", 1): run(0.6, 4.0), ("plain", 0): run(0.7, None), ("plain", 1): run(0.8, None)}
    rows = build_seed_rows([dp, plain], runs, [0, 1], plain, plain, None)
    assert rows[0]["epsilon"]["mean"] == 3.0 and "epsilon" not in rows[1]  # (2 + 4) / 2
    lines = format_seed_table(rows, "plain", "plain", None, "final", 0.0).splitlines()
    header = next(line for line in lines if line.startswith("| variant"))
    assert header.endswith("| epsilon |")


# ---------------------------------------------------------------- adaptive clipping (Andrew et al. 2021)


def test_adaptive_clip_by_hand() -> None:
    from chillfl.privacy.aggregate import AdaptiveClip

    # sigma = 1, sigma_b = 1: the updates' noise multiplier (1^-2 - (2*1)^-2)^(-1/2) = (3/4)^(-1/2) = 1.1547...
    rule = AdaptiveClip(quantile=0.5, lr=0.2, count_noise=1.0)
    assert rule.update_noise(1.0) == pytest.approx(2 / math.sqrt(3))
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=11, adaptive=rule)
    out = agg.aggregate(glob, _results([3.0, 4.0], [0.0, 0.5]), round=0)
    # C_0 = 1: norms 5 (clipped, b = 0) and 0.5 (b = 1); centred bits sum (0 - 1/2) + (1 - 1/2) = 0;
    # noised fraction (0 + e) / m + 1/2, m = 2, e ~ N(0, 1) from the round's count stream; C_1 = C_0 exp(-0.2 (fraction - 0.5)) = exp(-0.2 e / 2)
    e = torch.randn((), generator=torch.Generator().manual_seed(derive_seed(11, "privacy", "count", 0)), dtype=torch.float64).item()
    assert agg.clip_norm == pytest.approx(math.exp(-0.2 * e / 2), rel=1e-12)
    z = gaussian_like(glob, 2 / math.sqrt(3), derive_seed(11, "privacy", "server", 0))["w"]
    assert torch.allclose(out["w"], (torch.tensor([0.6, 1.3], dtype=torch.float64) + z) / 2, atol=1e-12)
    assert agg.round_metrics()["clip_norm"] == 1.0
    state = agg.state_dict()
    again = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=1.0, expected=2, seed=11, adaptive=rule)
    again.load_state_dict(state)
    assert again.clip_norm == agg.clip_norm


ADAPTIVE = {"privacy.target_quantile": 0.5, "privacy.clip_lr": 0.5, "privacy.clip_norm": 0.1}


def test_adaptive_clip_moves_and_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    records = run_experiment(config(**ADAPTIVE), write=False, progress=False).records
    norms = [r["agg_clip_norm"] for r in records]
    assert norms[0] == 0.1 and norms[1] != norms[0]
    assert [r["epsilon"] for r in records] == pytest.approx([gaussian_epsilon(1.5, t, 1e-3) for t in (1, 2, 3)], rel=1e-9)  # same budget
    check_resume("algorithm.fedavg", "sequential", 1, tmp_path, monkeypatch, **{"privacy.mechanism": "dp-fedavg", "privacy.delta": 1e-3, **ADAPTIVE})


@pytest.mark.parametrize(("per_round", "sigma", "written", "expected"), [(40, 1.0, 0.0, 2.0), (10, 1.5, 0.0, 1.5), (40, 1.0, 0.7, 0.7)])
def test_count_noise_default_is_the_larger_of_m_over_20_and_sigma(per_round: int, sigma: float, written: float, expected: float) -> None:
    # docs/privacy.md: count_noise 0 means max(m / 20, sigma), m = clients_per_round (Andrew et al.'s m/20, raised to sigma
    # for small runs); m = 40: 40 / 20 = 2 > 1; m = 10: 0.5 < 1.5; a written value is kept
    from chillfl.privacy.mechanisms.dp_fedavg import DpFedAvgOptions, settle
    from chillfl.privacy.spec import Noise, RunSizes

    noise = Noise(1.0, sigma, RunSizes(100, per_round, 3, 32, 1, (50,) * 100), 0)
    assert settle(DpFedAvgOptions(target_quantile=0.5, count_noise=written), noise).count_noise == expected
    assert settle(DpFedAvgOptions(count_noise=written), noise).count_noise == 0.0  # fixed clipping: no count released


def test_adaptive_clip_refusals() -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{**ADAPTIVE, "privacy.mechanism": "local"}))
    assert err.value.field == "privacy.target_quantile"
    with pytest.raises(ConfigError) as err:  # sigma_b = 0.5 <= sigma / 2 = 0.75
        build_experiment(config(**{**ADAPTIVE, "privacy.count_noise": 0.5}))
    assert err.value.field == "privacy.count_noise"


# ---------------------------------------------------------------- dp-sgd asks private_steps, not a class


@pytest.mark.parametrize(
    ("algorithm", "why"),
    [("fedrs", "label counts"), ("fedlc", "label counts"), ("ditto", "personal model v_k"), ("fedrep", "head and then its body"),
     ("fedbabu", "fine-tunes"), ("pfedme", "inner_steps"), ("perfedavg", "two (HF: four) gradients")],
)
def test_dp_sgd_refuses_a_method_with_its_declared_private_steps_reason(algorithm: str, why: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"algorithm.name": algorithm, "privacy.mechanism": "dp-sgd"}))
    assert err.value.field == "privacy.mechanism"
    assert f"does not bound all that algorithm {algorithm!r} uploads or reports from a client's data: " in err.value.message and why in err.value.message
    # and what to do: the mechanisms that noise the uploads instead (no step hook), from the registry
    assert err.value.message.endswith("; use an algorithm that trains once a round, or a mechanism that noises the uploads instead: dp-fedavg, local")


@pytest.mark.parametrize(("algorithm", "mechanism"), [("scaffold", "dp-fedavg"), ("scaffold", "local"), ("krum", "dp-fedavg")])
def test_a_mechanism_on_the_aggregate_refused_by_an_algorithm_names_those_that_leave_it_alone(algorithm: str, mechanism: str) -> None:
    # docs/privacy.md's table: SCAFFOLD (plain_sgd) refuses dp-fedavg and local, Krum (no weights) dp-fedavg (local's client-side
    # noise runs with it: any_rule), and both run dp-sgd
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"algorithm.name": algorithm, "privacy.mechanism": mechanism}))
    if mechanism == "local":  # any rule over one shared model's updates would do: the reason is the server step, not the weights
        assert err.value.field == "privacy.mechanism" and f"which the server step of algorithm {algorithm!r} is not (" in err.value.message
        assert err.value.message.endswith("; use an algorithm whose server keeps one shared model (FedAvg, median, Krum, ...), "
                                          "or a mechanism that leaves the aggregate alone: dp-sgd")
        return
    assert err.value.field == "privacy.mechanism" and f"which algorithm {algorithm!r} is not (" in err.value.message
    assert err.value.message.endswith("; use an algorithm whose server takes a weighted mean of the models, or a mechanism that leaves the aggregate alone: dp-sgd")


def test_every_built_in_whose_clients_train_on_their_own_declares_private_steps() -> None:
    # the fallback for an undeclared Personalising half is for plugins; a built-in names its own reason
    from chillfl.aggregation.base import Personalising
    from chillfl.aggregation.registry import algorithm_spec, registered_algorithms
    from registry_cases import NEEDS

    trainers, other_models = [], []
    for name in sorted(registered_algorithms()):
        required = {k: v for k, v in NEEDS.get(f"algorithm-{name}", {}).items() if k.startswith("algorithm.")}  # an option without a default (norm_bound's M)
        try:
            exp = build_experiment(config(**{"algorithm.name": name, "privacy.mechanism": "none", "temperature.policy": "none", **required}))
        except ConfigError as err:  # a method for other models (FedAlign: a slimmable ResNet): named below, not skipped silently
            assert err.field == "model.name", (name, err)
            other_models.append(name)
            continue
        if isinstance(exp.aggregator.client_half(), Personalising):
            trainers.append(name)
            assert algorithm_spec(name).capabilities.private_steps, name
    assert {"ditto", "fedrep", "fedrs", "fedlc", "pfedme"} <= set(trainers)  # the walk saw them
    assert other_models == ["fedalign", "fedbn"]  # FedAvg's client half with a term; FedBN's KeepLocal: no trainings of their own


def test_every_built_in_prototype_method_declares_private_steps() -> None:
    # class means of raw representations are computed outside training: no prototype method's upload is bounded by dp-sgd,
    # and each says why (the protocol is refused as a whole today; the declaration is what a per-method rule would read)
    from chillfl.settings.prototypes import built_in_names, method_spec

    assert {"fedproto", "fedhkd", "fedgh", "feddistill"} <= set(built_in_names())
    for name in built_in_names():
        assert method_spec(name).capabilities.private_steps, name


def test_a_plugins_own_trainings_are_refused_whether_declared_or_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "trainings_plugin.py").write_text(
        "from chillfl.extend import Capabilities, FedAvg, Local, LocalProgram, LocalSpec, Personal, Train\n\n\n"
        "class TwiceClient:  # trains twice a round: a Personalising client half, by its methods\n"
        "    def prepare(self, model, state, context):\n"
        "        return None\n\n"
        "    def finish(self, model, state, trained):\n"
        "        return {}, {}\n\n"
        "    def objectives(self, spec: LocalSpec):\n"
        "        return ()\n\n"
        "    def train(self, local: Local) -> LocalProgram:\n"
        "        first = yield Train(local.start, local.context)\n"
        "        out = yield Train(first.params, local.context)\n"
        "        return Personal(out.params, out.num_steps, out.mean_loss)\n\n\n"
        "class Twice(FedAvg):\n"
        "    capabilities = Capabilities(takes_weights=True)\n\n"
        "    def client_half(self):\n"
        "        return TwiceClient()\n\n\n"
        "class Reweighed(FedAvg):\n"
        "    capabilities = Capabilities(takes_weights=True, private_steps=\"each client reweighs its samples by its own label counts\")\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ConfigError) as err:
            build_experiment(config(**{"algorithm.name": "trainings_plugin:Twice", "privacy.mechanism": "dp-sgd"}))
        assert err.value.field == "privacy.mechanism" and "its clients run their own trainings" in err.value.message
        with pytest.raises(ConfigError) as err:
            build_experiment(config(**{"algorithm.name": "trainings_plugin:Reweighed", "privacy.mechanism": "dp-sgd"}))
        assert "from a client's data: each client reweighs its samples by its own label counts; use an algorithm that trains once a round" in err.value.message
        build_experiment(config(**{"algorithm.name": "trainings_plugin:Reweighed", "privacy.mechanism": "dp-fedavg"}))  # only per-sample steps ask
    finally:
        sys.modules.pop("trainings_plugin", None)


def test_an_unreachable_target_reads_as_one_sentence() -> None:
    """The accountant's "The privacy budget is too low." sat mid-line with its capital and full stop."""
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"privacy.target_epsilon": 1e-4}))
    assert err.value.field == "privacy.target_epsilon"
    assert "over the planned 3 rounds (the privacy budget is too low: the RDP accountant reports epsilon > " in err.value.message

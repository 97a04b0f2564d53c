"""Values worked out by hand (or from the papers' closed forms) for the privacy accounting and the attacks' formulas,
each one written against a mutation of the code that the other tests let through (a mutation audit, 2026-12-04): a
boundary, a constant or a choice of stream that the existing tests did not pin."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from chillfl.attacks.select import attackers
from chillfl.seeds import derive_seed
from chillfl.settings.attack import AttackConfig


# ---------------------------------------------------------------- the accountant's floors: "at or below" is refused


def test_a_target_exactly_on_a_floor_is_refused_without_opacus_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # noise_for's docstring: a target *at or below* the floor is reached by no sigma (at zero RDP the conversion still
    # leaves the floor, and any sigma adds RDP > 0 to it; the PRV report is never under its floor). Exactly on it, Opacus's
    # search would double sigma to 1e6 before its own "too low": refused here at once, the search never asked.
    pytest.importorskip("opacus")
    import opacus.accountants.utils as utils

    from chillfl.privacy import accounting

    def searched(**kwargs: Any) -> float:
        raise AssertionError("Opacus's search ran for a target on the floor")

    monkeypatch.setattr(utils, "get_noise_multiplier", searched)
    accounting._searched.cache_clear()
    try:
        for kind, floor in (("rdp", accounting.rdp_floor(1e-3)), ("prv", accounting.prv_floor(1e-3))):
            with pytest.raises(ValueError, match="too low"):
                accounting.noise_for(floor, 1e-3, 0.5, 3, kind)
        with pytest.raises(ValueError, match="too low"):
            accounting.noise_for(accounting.rdp_floor(1e-5, "extended"), 1e-5, 0.5, 3, "rdp", "extended")
    finally:
        accounting._searched.cache_clear()


# ---------------------------------------------------------------- local's soft-label rows: N(0, (sigma C)^2)


def test_row_noise_has_std_sigma_times_c_from_the_rows_stream() -> None:
    # softlabels.py: r_i min(1, C / ||r_i||) + z_i, z_i ~ N(0, (sigma C)^2 I), from derive_seed(seed, "privacy", "rows",
    # round, client). C = 0.5, sigma = 2: the noise is 1.0 x the stream's standard normals (a C of 1 would hide C's factor).
    # Row (3, 4): L2 norm 5, scaled by 0.5 / 5 = 0.1 to (0.3, 0.4); row (0.1, 0.2): norm 0.2236 < C, kept.
    from chillfl.privacy.softlabels import RowNoise

    rows = torch.tensor([[3.0, 4.0], [0.1, 0.2]], dtype=torch.float64)
    out = RowNoise(0.5, 2.0, "l2", 11, probabilities=False).release(rows, client_id=2, round=7)
    gen = torch.Generator().manual_seed(derive_seed(11, "privacy", "rows", 7, 2))
    z = torch.randn((2, 2), generator=gen, dtype=torch.float64)
    assert torch.allclose(out, torch.tensor([[0.3, 0.4], [0.1, 0.2]], dtype=torch.float64) + z * 1.0, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- dp-sgd: a straggler's one step is charged


def test_a_straggler_that_trains_one_step_is_charged_one_step() -> None:
    # training.local.completed_steps: a client at work in (0, 1) completes max(1, int(work * planned)) batches, at least
    # one; the accountant must charge what ran. Client 1: 50 samples, batches of 16 -> 4 a epoch (the last of 2), 2 epochs:
    # 8 planned; at work 0.1, int(0.8) = 0 -> 1 step at 16/50 = 0.32 (charging 0 would leave a trained step unaccounted).
    from chillfl.privacy.mechanisms import dp_sgd
    from chillfl.privacy.protocol import completed
    from chillfl.privacy.spec import Participant, RunSizes
    from chillfl.training.local import completed_steps

    assert completed(50, 16, 2, 0.1) == len(completed_steps([torch.zeros(1)] * 8, 0.1)) == 1
    sizes = RunSizes(5, 2, 10, 16, 2, (100, 50, 33, 16, 0))
    charged = dp_sgd.charges(dp_sgd.DpSgdOptions(), sizes, [Participant(1, 0.1)])
    assert [(c.unit, c.rate, c.steps) for c in charged] == [("client 1", 0.32, 1)]


# ---------------------------------------------------------------- which clients attack


@pytest.mark.parametrize(("fraction", "clients", "seed"), [(0.2, 10, 3), (0.35, 90, 0), (0.5, 7, 12)])
def test_the_attackers_are_the_documented_streams_draw(fraction: float, clients: int, seed: int) -> None:
    # docs/attacks.md: round(fraction * num_clients) clients, drawn once, without replacement, from the stream
    # (seed, "attack", "clients"): numpy's Generator.choice on that seed (0.35 x 90 = 31.5 -> 32, 0.5 x 7 = 3.5 -> 4)
    count = {0.2: 2, 0.35: 32, 0.5: 4}[fraction]
    drawn = np.random.default_rng(derive_seed(seed, "attack", "clients")).choice(clients, size=count, replace=False)
    table = AttackConfig.from_table({"kind": "scaling", "fraction": fraction}, "attack")
    assert attackers(table, clients, seed) == frozenset(int(c) for c in drawn)


# ---------------------------------------------------------------- label_flip's map


def test_a_label_map_naming_the_class_count_itself_is_refused() -> None:
    # labels are 0 .. C - 1: a map entry equal to C (3 of 3 classes) names no class; refused on its field, not an
    # out-of-range label in the attacker's loss
    from chillfl.attacks.poison import flip_map
    from chillfl.errors import ConfigError

    assert flip_map((0, 2, 1), 3) == [0, 2, 1] and flip_map((), 3) == [2, 1, 0]
    with pytest.raises(ConfigError) as err:
        flip_map((0, 1, 3), 3)
    assert err.value.field == "attack.label_map"


# ---------------------------------------------------------------- Min-Max / Min-Sum: the paper's conditions hold at equality


def test_the_agnostic_conditions_hold_on_their_boundary() -> None:
    # Shejwalkar & Houmansadr 2021, Algorithm 1's conditions are "<=": max_i ||d_m - d_i|| <= max_ij ||d_i - d_j|| (Min-Max),
    # sum_i ||d_m - d_i||^2 <= max_i sum_j ||d_i - d_j||^2 (Min-Sum). Benign 1-d updates d = (0, 2): mu = 1, p = -sign(mu) = -1,
    # d_m(g) = 1 - g. Min-Max: max((1 - g)^2, (1 + g)^2) = (1 + g)^2 <= 4 up to g = 1 exactly; Min-Sum: (1 - g)^2 + (1 + g)^2
    # = 2 + 2 g^2 <= max(4, 4) = 4, also up to g = 1. Every number here is exact in float64; the search from gamma_init = 1
    # meets the boundary on its first try and keeps it (it only ever tries larger gammas after).
    from chillfl.attacks import updates

    w = {"w": torch.zeros(1, dtype=torch.float64)}
    benign = [{"w": torch.tensor([0.0], dtype=torch.float64)}, {"w": torch.tensor([2.0], dtype=torch.float64)}]
    _, _, spread = updates.agnostic_direction(w, benign, "sign")
    assert spread.distances_sq(1.0).tolist() == [0.0, 4.0] and spread.pairwise.max().item() == 4.0
    assert updates.min_max_holds(spread, 1.0) and not updates.min_max_holds(spread, 1.0 + 2**-40)
    assert updates.min_sum_holds(spread, 1.0) and not updates.min_sum_holds(spread, 1.0 + 2**-40)
    for condition in (updates.min_max_holds, updates.min_sum_holds):
        sent, gamma = updates.agnostic(w, benign, w, "sign", condition, 1.0, 1e-5)
        assert gamma == 1.0 and sent["w"].tolist() == [0.0]  # w + mu + gamma p = 0 + 1 - 1


# ---------------------------------------------------------------- replace-one neighbours: only where sampling does not amplify


def test_a_plugin_spec_with_replace_adjacency_and_subsampling_is_refused() -> None:
    # Opacus's subsampled bounds are for add/remove neighbours: a spec that says its releases are subsampled and its
    # neighbours replace-one (sensitivity 2C) would be charged a bound that does not hold; its own declaration is refused
    # when the spec is made (the config's [privacy] adjacency is refused separately, tests/test_privacy.py)
    from chillfl.privacy.mechanisms.local import LocalOptions, accounts, charges, rows
    from chillfl.privacy.spec import MechanismSpec

    with pytest.raises(ValueError, match="'replace' adjacency"):
        MechanismSpec("mine", LocalOptions, accounts, charges=charges, rows=rows, adjacency="replace", subsampled=True)
    assert MechanismSpec("mine", LocalOptions, accounts, charges=charges, rows=rows, adjacency="replace", subsampled=False).adjacency == "replace"
    assert MechanismSpec("mine", LocalOptions, accounts, charges=charges, rows=rows, subsampled=True).adjacency == "add_remove"


# ---------------------------------------------------------------- the ledger: a charge of no step spends nothing


def test_a_charge_of_zero_steps_leaves_the_history_and_epsilon_alone() -> None:
    # add_steps: "steps <= 0" returns the history as it is. A (sigma, q, 0) entry would add 0 RDP but still make the unit's
    # history non-empty, and a non-empty history is converted: a unit that spent nothing would report the RDP floor
    # (0.0286 at delta 1e-3, tests/test_privacy_math.py) instead of 0, and carry the entry into the checkpoint
    pytest.importorskip("opacus")
    from chillfl.privacy.accounting import Ledger, add_steps

    assert add_steps(((1.0, 0.5, 3),), 2.0, 0.5, 0) == ((1.0, 0.5, 3),) and add_steps((), 1.0, 0.5, -1) == ()
    ledger = Ledger(1e-3)
    ledger.spend("client 0", 1.0, 0.5, 0)
    assert ledger.histories == {"client 0": ()} and ledger.epsilon() == 0.0 and ledger.epsilon("client 0") == 0.0
    assert [t.shape for t in ledger.state_dict().values()] == [(0, 3)]


# ---------------------------------------------------------------- soft-label rows: a skipped round releases and reports nothing


def test_a_skipped_soft_label_round_reports_no_epsilon_of_either_kind() -> None:
    # privacy/protocol.py, Accounted.skipped_round: under Poisson sampling a skipped round is charged (the sampled mechanism's
    # bound needs it) for parameter sharing only; soft-label rows are q = 1 releases per uploading client, so a round nobody
    # uploaded in releases nothing and its record carries neither epsilon nor epsilon_upload (not one of the pair).
    # Seed 1, q = 2/6: clients [0, 1, 5], [1], then nobody (tests/test_poisson_sampling.py). Client 1 uploads twice: per
    # row two Gaussian releases at sigma 2 / sensitivity 2 (local: replace-one) = 1
    pytest.importorskip("opacus")
    from chillfl.config import load_config
    from chillfl.privacy.accounting import epsilon_of
    from chillfl.runner import run_experiment

    cfg = {"seed": 1, "dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 6, "federation.clients_per_round": 2, "federation.rounds": 3,
           "federation.sampling": "poisson", "client.batch_size": 32, "client.lr": 0.1, "eval.client_split_size": 20, "distillation.method": "dsfl",
           "distillation.public_size": 60, "distillation.subset_size": 20, "privacy.mechanism": "local", "privacy.noise_multiplier": 2.0, "privacy.delta": 1e-3}
    first, second, skipped = run_experiment(load_config(None, cfg), write=False, progress=False).records
    assert [first["clients"], second["clients"], skipped["skipped"]] == [[0, 1, 5], [1], True]
    assert second["epsilon"] == pytest.approx(epsilon_of(((1.0, 1.0, 2),), 1e-3), rel=1e-12)
    assert "epsilon" not in skipped and "epsilon_upload" not in skipped


# ---------------------------------------------------------------- adaptive clipping: the count may not take the whole budget


def test_a_count_noise_of_exactly_half_sigma_is_refused() -> None:
    # Andrew et al. 2021, Sec. 3: sigma_u = (sigma^-2 - (2 sigma_b)^-2)^(-1/2) needs 2 sigma_b > sigma. At 2 sigma_b = sigma
    # (1.5 and 0.75) the count takes the whole budget: sigma_u = 0^(-1/2), infinite noise on the updates; refused on its field
    from chillfl.errors import ConfigError
    from chillfl.privacy.aggregate import AdaptiveClip
    from chillfl.privacy.mechanisms.dp_fedavg import DpFedAvgOptions, settle
    from chillfl.privacy.spec import Noise, RunSizes

    noise = Noise(1.0, 1.5, RunSizes(100, 10, 3, 32, 1, (50,) * 100), 0)
    with pytest.raises(ConfigError) as err:
        settle(DpFedAvgOptions(target_quantile=0.5, count_noise=0.75), noise)
    assert err.value.field == "privacy.count_noise"
    # just above: allowed, and sigma_u by hand: sigma_b = 1.5 -> (1/2.25 - 1/9)^(-1/2) = (1/3)^(-1/2) = sqrt(3)
    assert settle(DpFedAvgOptions(target_quantile=0.5, count_noise=1.5), noise).count_noise == 1.5
    assert AdaptiveClip(0.5, 0.2, 1.5).update_noise(1.5) == pytest.approx(3**0.5, rel=1e-12)


# ---------------------------------------------------------------- Poisson sampling: dropout thins who reports


def test_the_skipped_round_warning_reads_the_reporting_rate_after_dropout(caplog: pytest.LogCaptureFixture) -> None:
    # dp_fedavg._warn_skips: a client reports w.p. q (1 - dropout). 4 clients, 4 a round (q = 1), min_clients 2: without
    # dropout every client reports, P[1 <= Binomial(3, 1) < 2] = 0, no warning; at dropout 0.5 the rate is 1/2 and exactly
    # one of the 3 others reports w.p. 3/8 a round: 10 rounds -> 3.75, far above delta = 1e-3
    from chillfl.privacy.mechanisms.dp_fedavg import _warn_skips

    with caplog.at_level("WARNING"):
        _warn_skips(10, 4, 4, 0.0, 2, 1e-3)
    assert not caplog.records
    with caplog.at_level("WARNING"):
        _warn_skips(10, 4, 4, 0.5, 2, 1e-3)
    [line] = [r.getMessage() for r in caplog.records]
    assert "(1 - dropped stragglers) = 0.5 " in line and "x 3.75 to delta" in line


def test_a_probability_row_with_nothing_left_after_the_noise_becomes_uniform() -> None:
    # softlabels.py: probability rows go back to the simplex, clamped at 0 and renormalised, "uniform where nothing is left".
    # sigma = 0 (no noise) and a row (-3, -4, ...) clipped to C = 1 stays negative everywhere: clamped to all zeros, so the
    # row released is 1/3 each (a zero row is no distribution); (1, 1, 2) stays positive: 1/4, 1/4, 1/2 after renormalising
    from chillfl.privacy.softlabels import RowNoise

    rows = torch.tensor([[-3.0, -4.0, -1.0], [1.0, 1.0, 2.0]], dtype=torch.float64)
    out = RowNoise(1.0, 0.0, "l2", 0, probabilities=True).release(rows, 0, 0)
    assert out[0].tolist() == [1 / 3, 1 / 3, 1 / 3]  # filled, not computed: exact
    assert out[1].tolist() == pytest.approx([0.25, 0.25, 0.5], rel=1e-12)


# ---------------------------------------------------------------- the PRV probe asks about the sigma the ledger charges


def test_the_prv_probe_asks_about_the_accounted_sigma(monkeypatch: pytest.MonkeyPatch) -> None:
    # build._probe checks, before the run, that the PRV accountant can account each unit's planned history at the sigma
    # the ledger will charge: sigma / sensitivity (plan.accounted_sigma). local's replace-one neighbours (sensitivity 2) at
    # sigma 1.0 are charged 0.5 over 3 rounds at q = 1; a probe at 1.0 would pass histories whose real grid (or
    # discretisation) fails after a round (at delta 1e-5 and q = 1, Opacus's discretisation failed at sigma 0.02 and passed
    # at 0.04 when this was written: noise_multiplier 0.04 would have been probed at 0.04 and charged at 0.02)
    pytest.importorskip("opacus")
    from chillfl.config import load_config
    from chillfl.privacy import build
    from chillfl.privacy.spec import RunSizes

    asked: list[tuple[float, float, float, int]] = []
    monkeypatch.setattr(build, "history_refusal", lambda delta, sigma, rate, steps, kind, orders: asked.append((delta, sigma, rate, steps)))
    cfg = load_config(None, {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.clients_per_round": 2,
                             "federation.rounds": 3, "privacy.mechanism": "local", "privacy.accountant": "prv", "privacy.noise_multiplier": 1.0,
                             "privacy.delta": 1e-3})
    plan = build._plan.__wrapped__(cfg.privacy, "parameters", RunSizes(4, 2, 3, 32, 1, (100,) * 4), 0)  # type: ignore[attr-defined]
    assert plan.sensitivity == 2.0 and plan.accounted_sigma == 0.5
    assert asked == [(1e-3, 0.5, 1.0, 3)]


@pytest.mark.filterwarnings("ignore:Optimal order")  # Opacus's own domain sizing, at its own orders
@pytest.mark.parametrize("history", [((8.0, 0.01, 10),), ((4.0, 0.01, 100),), ((50.0, 0.5, 1),)])
def test_the_prv_grid_is_opacus_own_where_the_best_rdp_order_is_past_63(history: tuple[tuple[float, float, int], ...]) -> None:
    # Opacus's PRVAccountant sizes its domain with an RDPAccountant at Opacus's default orders (compute_safe_domain_size),
    # whatever rdp_orders says. Where the best order is past 63 (large sigma, small q, few steps: tests/test_privacy_math.py)
    # a grid read at the extended orders would be narrower, and the epsilon no longer Opacus's; here it is its grid point for point
    pytest.importorskip("opacus")
    from opacus.accountants import PRVAccountant
    from opacus.accountants.analysis.prv import PoissonSubsampledGaussianPRV

    from chillfl.privacy.accounting import Ledger, epsilon_of

    (sigma, q, steps), = history
    theirs = PRVAccountant()._get_domain(prvs=[PoissonSubsampledGaussianPRV(q, sigma)], num_self_compositions=[steps], eps_error=0.01, delta_error=1e-8)
    ledger = Ledger(1e-5, "prv")
    assert ledger.prv_domain(history).size == theirs.size
    ledger.spend("clients", sigma, q, steps)
    assert ledger.epsilon() == epsilon_of(history, 1e-5, "prv")


def test_an_infinite_epsilon_is_written_as_null() -> None:
    # JSON has no infinity (Python writes the non-standard Infinity): finite() turns it into None, a finite epsilon passes
    import math

    from chillfl.privacy.accounting import finite

    assert finite(math.inf) is None and finite(0.0) == 0.0 and finite(2.5) == 2.5

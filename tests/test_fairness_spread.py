"""``local_acc_std`` and ``local_acc_worst10``: the spread of the clients' own accuracies beside their mean ``local_acc``.

Hand-worked values of the two formulas, the keys recorded with ``log.per_client`` off and absent with ``local_acc``,
their agreement with the per-client map they summarise, and the same bits under the sequential and vectorised executors.
"""

from __future__ import annotations

import math

import pytest

from chillfl.protocols.common import LocalLog, fairness, worst_count
from chillfl.storage.results import summarize
from methods_e2e import config, records

SPREAD = ("local_acc_std", "local_acc_worst10")


def test_four_clients_by_hand() -> None:
    # mean 0.65; squared deviations 0.2025 + 0.0225 + 0.0625 + 0.1225 = 0.41; / 4 = 0.1025. ceil(0.4) = 1 client: 0.2
    std, worst = fairness({0: 0.2, 1: 0.5, 2: 0.9, 3: 1.0})
    assert std == pytest.approx(math.sqrt(0.1025), abs=1e-15)
    assert worst == 0.2


def test_worst_share_is_the_ceiling_of_a_tenth_and_at_least_one() -> None:
    assert [worst_count(n) for n in (1, 2, 9, 10, 11, 20, 21, 25, 30, 100, 101)] == [1, 1, 1, 1, 2, 2, 3, 3, 3, 10, 11]
    # 25 clients 0.04 .. 1.00 in a shuffled id order: the worst 3 are 0.04, 0.08, 0.12
    accs = {(7 * i) % 25: (i + 1) / 25 for i in range(25)}
    _, worst = fairness(accs)
    assert worst == pytest.approx((0.04 + 0.08 + 0.12) / 3, abs=1e-15)


def test_one_client_has_no_spread_and_none_has_no_value() -> None:
    assert fairness({4: 0.75}) == (0.0, 0.75)
    assert fairness({}) is None


def test_same_bits_whatever_order_the_replies_came_in() -> None:
    values = [0.1, 0.7, 0.35, 0.9, 0.55, 0.2, 0.65, 0.05, 0.8, 0.45, 0.3, 0.95]
    forward = {c: v for c, v in enumerate(values)}
    backward = {c: forward[c] for c in reversed(range(len(values)))}
    assert fairness(forward) == fairness(backward)


def test_a_non_finite_model_makes_both_nan_as_it_makes_the_mean() -> None:
    std, worst = fairness({0: 0.5, 1: math.nan, 2: 0.9})
    assert math.isnan(std) and math.isnan(worst)


def test_local_log_reports_the_spread_without_per_client_and_leaves_empty_splits_out() -> None:
    log = LocalLog(empty=frozenset({5}))
    for cid, acc in ((3, 1.0), (0, 0.2), (2, 0.9), (1, 0.5), (5, math.nan)):
        log.record(cid, acc, 0.1, None)
    out = log.metrics([3, 0, 2, 1, 5], "sampled", per_client=False)
    assert "local_accs" not in out and out["local_clients"] == 4
    assert (out["local_acc_std"], out["local_acc_worst10"]) == fairness({0: 0.2, 1: 0.5, 2: 0.9, 3: 1.0})
    with_map = log.metrics([3, 0, 2, 1, 5], "sampled", per_client=True)
    assert {k: with_map[k] for k in SPREAD} == {k: out[k] for k in SPREAD}
    nobody = LocalLog().metrics([0, 1], "sampled")
    assert nobody["local_acc"] is None and all(nobody[k] is None for k in SPREAD)


def test_summary_has_the_final_spread() -> None:
    recs = [{"round": 1, "local_acc": 0.5, "local_acc_std": 0.2, "local_acc_worst10": 0.1},
            {"round": 2, "local_acc": 0.6, "local_acc_std": 0.15, "local_acc_worst10": 0.3}]
    s = summarize(recs)
    assert (s["final_local_acc_std"], s["final_local_acc_worst10"]) == (0.15, 0.3)
    assert "best_local_acc_std" not in s and "best_local_acc_worst10" not in s
    assert "final_local_acc_std" not in summarize([{"round": 1, "global_acc": 0.5}])


def test_tiny_run_records_the_spread_of_its_per_client_accuracies() -> None:
    cfg = config(**{"eval.clients": "all", "federation.rounds": 2})
    plain = records(cfg)
    logged = records(cfg.with_overrides({"log.per_client": True}))
    for rec, full in zip(plain, logged):
        assert "local_accs" not in rec and all(rec[k] is not None for k in SPREAD)
        spread = fairness({int(c): v for c, v in full["local_accs"].items()})
        assert (full["local_acc_std"], full["local_acc_worst10"]) == spread == (rec["local_acc_std"], rec["local_acc_worst10"])
    vectorized = records(cfg.with_overrides({"log.per_client": True, "executor": "vectorized"}))
    for seq, vec in zip(logged, vectorized):  # a tiny run: the same per-client accuracies, so the same bits
        assert vec["local_accs"] == seq["local_accs"]
        assert [vec[k] for k in SPREAD] == [seq[k] for k in SPREAD]


def test_no_local_evaluation_records_no_spread() -> None:
    recs = records(config(**{"eval.clients": "none", "federation.rounds": 1}))
    assert all("local_acc" not in r and not any(k in r for k in SPREAD) for r in recs)

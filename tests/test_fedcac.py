"""FedCAC: its formulas on hand-worked values, the server's customised models, a replayed round, executors and resume.

The server keeps every client's latest model and critical mask; it sends client i its critical parameters averaged
with its collaborators' (the clients whose critical locations overlap i's at least the round's threshold) and the
others from the global model. Every expected number below is worked out in the comment beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from chillfl.aggregation.base import ClientResult, Trained
from chillfl.aggregation.fedcac import (
    PREFIX,
    FedCAC,
    FedCACAveraged,
    FedCACClient,
    FedCACOptions,
    critical_mask,
    overlap_rates,
    sensitivity,
    threshold,
)
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.local import evaluate
from methods_e2e import assert_executors_agree, cli_option_error, config, records, resumed_records


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values)


def mask(*bits: int) -> torch.Tensor:
    return torch.tensor(bits, dtype=torch.bool)


def result(cid: int, w: torch.Tensor, n: int = 10) -> ClientResult:
    return ClientResult(cid, {"w": w}, n, 1, 0.1, 1.0, 0.0)


# ---------------------------------------------------------------- sensitivity and the critical mask


def test_sensitivity_and_top_tau_mask_of_a_tiny_layer_by_hand() -> None:
    # before (1, 1, 1, 1), after (2, -1, 0.5, 3): change (1, -2, -0.5, 2); s = |after * change| = (2, 2, 0.25, 6)
    before, after = t(1.0, 1.0, 1.0, 1.0), t(2.0, -1.0, 0.5, 3.0)
    assert sensitivity(before, after).tolist() == [2.0, 2.0, 0.25, 6.0]
    # tau 0.5: int(0.5 * 4) = 2 -> the 2nd largest, 2, is the threshold; s >= 2 holds for 3 of them (the tie is critical too)
    assert critical_mask(before, after, 0.5).tolist() == [True, True, False, True]
    # tau 0.25: int(1) -> threshold 6, only the last; tau 1: every one (threshold 0.25)
    assert critical_mask(before, after, 0.25).tolist() == [False, False, False, True]
    assert critical_mask(before, after, 1.0).tolist() == [True, True, True, True]
    # tau 0.2: int(0.8) = 0 -> no critical parameter in a tensor this small
    assert critical_mask(before, after, 0.2).tolist() == [False, False, False, False]
    # a 2x2 weight: the share is per tensor (layer), the mask keeps its shape
    assert critical_mask(before.view(2, 2), after.view(2, 2), 0.25).tolist() == [[False, False], [False, True]]


def test_a_zero_threshold_takes_the_smallest_nonzero_sensitivity_and_no_change_makes_all_critical() -> None:
    # before (1, 1, 1, 1), after (1, 1, 2, 1): s = (0, 0, 2, 0); tau 0.5 -> the 2nd largest is 0 <= 1e-10, so the
    # threshold is the smallest s above 1e-20, 2: only the third
    assert critical_mask(t(1.0, 1.0, 1.0, 1.0), t(1.0, 1.0, 2.0, 1.0), 0.5).tolist() == [False, False, True, False]
    # a sensitivity at or below 1e-20 counts as zero: before 0, after (0, 1e-16, 0, 2): s = (0, 1e-32, 0, 4); the 2nd largest,
    # 1e-32, is <= 1e-10, and the smallest s above 1e-20 is 4: only the last (1e-32 as the threshold would make the second critical too)
    assert critical_mask(t(0.0, 0.0, 0.0, 0.0), t(0.0, 1e-16, 0.0, 2.0), 0.5).tolist() == [False, False, False, True]
    # nothing moved: s = 0 everywhere, no nonzero one -> the threshold stays 0 and every parameter is critical (the authors' code)
    assert critical_mask(t(1.0, 2.0), t(1.0, 2.0), 0.5).tolist() == [True, True]


# ---------------------------------------------------------------- overlaps and the threshold


def test_overlap_of_two_small_masks_by_hand() -> None:
    # a = 110010, b = 101010: n_a = n_b = 3, ||a - b||_1 = 2 (positions 1 and 2), |a and b| = 2
    # O_ab = 1 - 2 / (2 * 3) = 2/3 both ways. c = 100000 (n_c = 1): ||a - c||_1 = 2, |a and c| = 1
    # O_ac = 1 - 2 / (2 * 3) = 2/3, O_ca = 1 - 2 / (2 * 1) = 0 (divided by the first client's own count)
    a, b, c = mask(1, 1, 0, 0, 1, 0), mask(1, 0, 1, 0, 1, 0), mask(1, 0, 0, 0, 0, 0)
    counts = torch.tensor([[int((x & y).sum()) for y in (a, b, c)] for x in (a, b, c)])
    assert counts.tolist() == [[3, 2, 1], [2, 3, 1], [1, 1, 1]]
    rates = overlap_rates(counts)
    assert rates[0, 1].item() == pytest.approx(2 / 3) and rates[1, 0].item() == pytest.approx(2 / 3)
    assert rates[0, 2].item() == pytest.approx(2 / 3) and rates[2, 0].item() == 0.0
    # a client without any critical parameter overlaps no one
    assert overlap_rates(torch.tensor([[0, 0], [0, 2]]))[0, 1].item() == 0.0


def test_threshold_climbs_from_the_mean_overlap_to_the_largest_over_beta_rounds() -> None:
    # off-diagonal overlaps 0.75, 5/6, 0, 0, 0.5, 0.25: mean = (7/3) / 6 = 7/18, max = 5/6
    rates = torch.tensor([[1.0, 0.75, 0.0], [5 / 6, 1.0, 0.5], [0.0, 0.25, 1.0]], dtype=torch.float64)
    assert threshold(rates, 0, 4) == pytest.approx(7 / 18)
    assert threshold(rates, 2, 4) == pytest.approx(7 / 18 + 0.5 * (5 / 6 - 7 / 18))  # 11/18
    assert threshold(rates, 8, 4) == pytest.approx(7 / 18 + 2 * (5 / 6 - 7 / 18))  # past beta: above the largest


# ---------------------------------------------------------------- the server's customised models


def three_clients(beta: int) -> tuple[FedCAC, dict[str, torch.Tensor]]:
    """Round 0 from the global 0 (so s = theta^2): the masks are the top halves of |theta|.

    theta_0 = (4, 3, 2, 1): s = (16, 9, 4, 1), threshold 9 -> M_0 = 1100
    theta_1 = (3, 3, 3, 1): s = (9, 9, 9, 1), threshold 9 (a tie) -> M_1 = 1110
    theta_2 = (1, 2, 3, 4): s = (1, 4, 9, 16), threshold 9 -> M_2 = 0011
    n = 10, 10, 20 -> global = (theta_0 + theta_1 + 2 theta_2) / 4 = (9, 10, 11, 10) / 4 = (2.25, 2.5, 2.75, 2.5)
    """
    agg = FedCAC(4, ["w"], FedCACOptions(tau=0.5, beta=beta))
    out = agg.aggregate({"w": t(0.0, 0.0, 0.0, 0.0)}, [result(0, t(4.0, 3.0, 2.0, 1.0)), result(1, t(3.0, 3.0, 3.0, 1.0)), result(2, t(1.0, 2.0, 3.0, 4.0), 20)], 0)
    return agg, out


def test_customised_models_of_three_clients_by_hand() -> None:
    agg, glob = three_clients(beta=100)
    assert glob["w"].tolist() == [2.25, 2.5, 2.75, 2.5]
    assert [agg.masks[c]["w"].tolist() for c in range(3)] == [[True, True, False, False], [True, True, True, False], [False, False, True, True]]
    # shared counts c_ij = |M_i and M_j|: 1100/1110 -> 2, 1100/0011 -> 0, 1110/0011 -> 1; n = 2, 3, 2; client 3 none (no row)
    assert agg.held == [0, 1, 2] and agg.shared.tolist() == [[2, 2, 0], [2, 3, 1], [0, 1, 2]]
    # O_01 = 1 - (2 + 3 - 4) / 4 = 0.75, O_10 = 1 - 1/6 = 5/6, O_02 = O_20 = 0, O_12 = 1 - 3/6 = 0.5, O_21 = 1 - 3/4 = 0.25
    # one round done, beta 100: eps = 7/18 + (1/100)(5/6 - 7/18) = 0.3933...
    # C_0 = {1} (0.75), C_1 = {0, 2} (5/6, 0.5), C_2 = {} (0, 0.25)
    assert agg.collaborators(0, 1) == ([1], pytest.approx(7 / 18 + (5 / 6 - 7 / 18) / 100))
    assert agg.collaborators(1, 1)[0] == [0, 2] and agg.collaborators(2, 1)[0] == []
    # start_0: c_0 = (theta_0 + theta_1) / 2 = (3.5, 3, 2.5, 1) on M_0 = 1100, the global elsewhere -> (3.5, 3, 2.75, 2.5)
    # start_1: c_1 = (theta_0 + theta_1 + theta_2) / 3 = (8/3, 8/3, 8/3, 2) on 1110 -> (8/3, 8/3, 8/3, 2.5)
    # start_2: c_2 = theta_2 on 0011 -> (2.25, 2.5, 3, 4)
    sent = {c: agg.downlink(c, 1, glob).params for c in range(4)}
    torch.testing.assert_close(sent[0]["w"], t(3.5, 3.0, 2.75, 2.5))  # type: ignore[index]
    torch.testing.assert_close(sent[1]["w"], t(8 / 3, 8 / 3, 8 / 3, 2.5))  # type: ignore[index]
    torch.testing.assert_close(sent[2]["w"], t(2.25, 2.5, 3.0, 4.0))  # type: ignore[index]
    assert sent[3] is None  # client 3 never trained: the server holds nothing of it, it starts from the global model
    # the state round-trips
    again = FedCAC(4, ["w"], FedCACOptions(tau=0.5, beta=100))
    again.load_state_dict(agg.state_dict())
    torch.testing.assert_close(again.downlink(1, 1, glob).params["w"], t(8 / 3, 8 / 3, 8 / 3, 2.5))  # type: ignore[index]


def test_collaboration_narrows_as_rounds_pass() -> None:
    agg, glob = three_clients(beta=2)
    # one round done, beta 2: eps = 7/18 + (1/2)(8/18) = 11/18 = 0.611: C_1 = {0} (5/6; 0.5 falls below)
    # start_1 = (theta_0 + theta_1) / 2 = (3.5, 3, 2.5, 1) on 1110 -> (3.5, 3, 2.5, 2.5)
    assert agg.collaborators(1, 1)[0] == [0] and agg.collaborators(0, 1)[0] == [1]
    torch.testing.assert_close(agg.downlink(1, 1, glob).params["w"], t(3.5, 3.0, 2.5, 2.5))  # type: ignore[index]
    # three rounds done: eps = 7/18 + 1.5 (8/18) = 19/18 > every overlap: no collaborator, each critical part its own
    assert [agg.collaborators(c, 3)[0] for c in range(3)] == [[], [], []]
    torch.testing.assert_close(agg.downlink(1, 3, glob).params["w"], t(3.0, 3.0, 3.0, 2.5))  # type: ignore[index]


def test_an_overlap_equal_to_the_threshold_collaborates() -> None:
    # from the global 0 (s = theta^2), tau 0.5: theta_0 = (4, 3, 2, 1) -> M_0 = 1100; theta_1 = (1, 4, 3, 2): s = (1, 16, 9, 4),
    # threshold 9 -> M_1 = 0110. n_0 = n_1 = 2, |M_0 and M_1| = 1: O_01 = O_10 = 1 - (2 + 2 - 2) / (2 * 2) = 0.5, so the mean
    # and the largest overlap are both 0.5 and eps_t = 0.5 + (t / beta) * 0 = 0.5 exactly, at t = beta (= 1) too: O = eps,
    # and O_ij >= eps_t makes each the other's collaborator (with > neither would be)
    agg = FedCAC(2, ["w"], FedCACOptions(tau=0.5, beta=1))
    # n = 10, 30: global = 0.25 theta_0 + 0.75 theta_1 = (1 + 0.75, 0.75 + 3, 0.5 + 2.25, 0.25 + 1.5) = (1.75, 3.75, 2.75, 1.75)
    glob = agg.aggregate({"w": t(0.0, 0.0, 0.0, 0.0)}, [result(0, t(4.0, 3.0, 2.0, 1.0)), result(1, t(1.0, 4.0, 3.0, 2.0), 30)], 0)
    torch.testing.assert_close(glob["w"], t(1.75, 3.75, 2.75, 1.75))
    assert agg.collaborators(0, 1) == ([1], 0.5) and agg.collaborators(1, 1) == ([0], 0.5)
    # c = (theta_0 + theta_1) / 2 = (2.5, 3.5, 2.5, 1.5) for both; start_0 on 1100: (2.5, 3.5, 2.75, 1.75);
    # start_1 on 0110: (1.75, 3.5, 2.5, 1.75) (alone, they would be (4, 3, 2.75, 1.75) and (1.75, 4, 3, 1.75))
    torch.testing.assert_close(agg.downlink(0, 1, glob).params["w"], t(2.5, 3.5, 2.75, 1.75))  # type: ignore[index]
    torch.testing.assert_close(agg.downlink(1, 1, glob).params["w"], t(1.75, 3.5, 2.5, 1.75))  # type: ignore[index]


def test_the_largest_overlap_collaborates_at_t_equal_beta_though_the_formula_rounds_above_it() -> None:
    # 40 parameters from the global 0 (s = theta^2), tau 0.25: int(0.25 * 40) = 10 critical each. theta is 2 on the
    # critical positions and 1 elsewhere (s = 4 or 1): M_0 = 20..29, M_1 = 0..9, M_2 = 0..8 and 10, so n = 10 each,
    # c_12 = 9 and c_01 = c_02 = 0: O_12 = O_21 = 1 - (10 + 10 - 18) / 20 = 1 - 0.1 = 0.9, the other four
    # 1 - 20 / 20 = 0. mean = 1.8 / 6 = 0.3, max = 0.9. At t = beta (= 1) eps = 0.3 + (0.9 - 0.3): in doubles
    # 0.9 - 0.3 = 0.6000000000000001 and 0.3 + 0.6000000000000001 = 0.9000000000000001 > 0.9 (both sums are
    # order-free: the zeros add nothing), which shut 1 and 2 out; kept <= the largest overlap, eps = 0.9 and O_12 >= eps
    assert 0.3 + (0.9 - 0.3) > 0.9  # the float arithmetic itself (IEEE doubles, any x86-64)
    critical = {0: range(20, 30), 1: range(0, 10), 2: [*range(0, 9), 10]}
    uploads = [result(c, torch.tensor([2.0 if i in critical[c] else 1.0 for i in range(40)])) for c in range(3)]
    agg = FedCAC(3, ["w"], FedCACOptions(tau=0.25, beta=1))
    agg.aggregate({"w": torch.zeros(40)}, uploads, 0)
    assert agg.shared.tolist() == [[10, 0, 0], [0, 10, 9], [0, 9, 10]]
    assert agg.collaborators(1, 0) == ([2], 0.3) and agg.collaborators(2, 0) == ([1], 0.3)  # t = 0: the mean
    assert agg.collaborators(1, 1) == ([2], 0.9) and agg.collaborators(2, 1) == ([1], 0.9)  # t = beta: the largest
    assert agg.collaborators(0, 1) == ([], 0.9)
    # past beta the formula stands: eps = 0.3 + 2 (0.6000000000000001) = 1.5 > 0.9, no collaborator
    assert agg.collaborators(1, 2) == ([], pytest.approx(1.5))


def test_overlaps_all_equal_are_all_at_the_threshold_at_every_round() -> None:
    # three masks of 3 sharing 1 pairwise: every O_ij = 1 - (3 + 3 - 2) / 6 = 1 - 0.6666666666666666 = 0.33333333333333337
    # in doubles, so mean = max and eps_t = max at every t (max - mean = 0). The sum of the six in floats is 2.0 or
    # 2.0000000000000004 by the order it is added in (one by one: the latter, and mean 0.3333333333333334 > max, which
    # put eps_0 above every overlap: no collaborator at all at t = 0; pairwise: 2.0, mean 0.3333333333333333 < max,
    # and past beta eps = mean + 1.5 (max - mean) could round above max); the mean kept within [min, max] = [max, max]
    # is max whatever the order, so eps_t = max + (t / beta) 0 = max and each has the other two at every t
    rates = overlap_rates(torch.tensor([[3, 1, 1], [1, 3, 1], [1, 1, 3]]))
    top = float(rates[0, 1])
    assert top == 1 - 4 / 6
    for rounds_done in (0, 1, 2, 3):  # beta 2: before, at and past it
        assert threshold(rates, rounds_done, 2) == top
    # the server's: 6 parameters from the global 0, tau 0.5 (3 critical), theta 2 on M_0 = 012, M_1 = 034, M_2 = 135
    # and 1 elsewhere (s = 4 or 1): each pair shares one position (0, 1, 3)
    critical = {0: (0, 1, 2), 1: (0, 3, 4), 2: (1, 3, 5)}
    agg = FedCAC(3, ["w"], FedCACOptions(tau=0.5, beta=2))
    agg.aggregate({"w": torch.zeros(6)}, [result(c, torch.tensor([2.0 if i in critical[c] else 1.0 for i in range(6)])) for c in range(3)], 0)
    assert agg.shared.tolist() == [[3, 1, 1], [1, 3, 1], [1, 1, 3]]
    for rounds_done in (0, 2, 3):
        assert [agg.collaborators(c, rounds_done)[0] for c in range(3)] == [[1, 2], [0, 2], [0, 1]]


def test_the_server_measures_the_mask_against_the_start_it_sent() -> None:
    agg, glob = three_clients(beta=2)
    # round 1 (one round done), client 1 was sent (3.5, 3, 2.5, 2.5) (above) and uploads it + (0, 1, 0, -1) = (3.5, 4, 2.5, 1.5):
    # s = |upload * change| = (0, 4, 0, 1.5); tau 0.5 -> threshold 1.5 -> M_1 = 0101 (measured from the global, (2.25, 2.5,
    # 2.75, 2.5), it would be s = (2.8125, 6, 0.625, 1.5) -> 1100: so this checks the start)
    out = agg.aggregate(glob, [result(1, t(3.5, 4.0, 2.5, 1.5))], 1)
    assert agg.masks[1]["w"].tolist() == [False, True, False, True]
    # c_10 = |0101 and 1100| = 1, c_12 = |0101 and 0011| = 1, c_11 = 2; the others' counts unchanged
    assert agg.shared.tolist() == [[2, 1, 0], [1, 2, 1], [0, 1, 2]]
    torch.testing.assert_close(agg.models[1]["w"], t(3.5, 4.0, 2.5, 1.5))
    torch.testing.assert_close(out["w"], t(3.5, 4.0, 2.5, 1.5))  # one upload: the global model is it
    assert agg.round_metrics() == {"collaborators": 1.0, "threshold": pytest.approx(11 / 18)}  # C_1 = {0} when it was sent


def test_averaged_makes_the_start_the_next_round_sends() -> None:
    # local_eval = "averaged": after round 0 the server's model of client 1 is its start for round 1 (one round done):
    # (8/3, 8/3, 8/3, 2.5) (test_customised_models_of_three_clients_by_hand); a client not held has none (the global)
    agg = FedCACAveraged(4, ["w"], FedCACOptions(tau=0.5, beta=100, local_eval="averaged"))
    glob = agg.aggregate({"w": t(0.0, 0.0, 0.0, 0.0)}, [result(0, t(4.0, 3.0, 2.0, 1.0)), result(1, t(3.0, 3.0, 3.0, 1.0)), result(2, t(1.0, 2.0, 3.0, 4.0), 20)], 0)
    made = agg.client_model(1, glob)["w"]
    torch.testing.assert_close(made, t(8 / 3, 8 / 3, 8 / 3, 2.5))
    assert torch.equal(made, agg.downlink(1, 1, glob).params["w"])  # type: ignore[index]
    assert agg.client_model(3, glob) == {}
    # the client's model is that start with its own buffers (not its trained theta_i)
    half = agg.client_half()
    assert isinstance(half, FedCACClient) and half.after_average
    state = {f"{PREFIX}w": t(3.0, 3.0, 3.0, 1.0), f"{PREFIX}bn.running_mean": t(7.0)}
    assert half.personal_model(state, {"w": made, "bn.running_mean": t(0.0)}) == {"w": made, "bn.running_mean": t(7.0)}
    restored = FedCACAveraged(4, ["w"], FedCACOptions(local_eval="averaged"))
    restored.load_state_dict(agg.state_dict())
    assert restored.rounds_done == 1 and torch.equal(restored.client_model(1, glob)["w"], made)


# ---------------------------------------------------------------- the client half


def test_the_client_trains_from_the_sent_start_with_its_own_buffers_and_keeps_the_trained_model() -> None:
    half = FedCACClient(frozenset({"w"}))
    state = {f"{PREFIX}w": t(9.0), f"{PREFIX}bn.running_mean": t(7.0)}
    start, context = half.prepare(state, {"w": t(1.0), "bn.running_mean": t(0.0)}, {"k": 1.0})
    assert start == {"w": t(1.0), "bn.running_mean": t(7.0)} and context == {"k": 1.0}  # parameters as sent, buffers its own
    first, _ = half.prepare({}, {"w": t(1.0), "bn.running_mean": t(0.0)}, {})
    assert first["bn.running_mean"].item() == 0.0  # before its first training: the global buffers
    trained = Trained(0, torch.ones(1, 1), torch.zeros(1, dtype=torch.long), start, {}, {}, 0.1, 1.0, {"w": t(2.0), "bn.running_mean": t(6.0)}, 1)
    kept, report = half.finish(torch.nn.Identity(), state, trained)
    assert kept == {f"{PREFIX}w": t(2.0), f"{PREFIX}bn.running_mean": t(6.0)} and report == {}
    assert half.personal_model(kept, {"w": t(0.0)}) == {"w": t(2.0), "bn.running_mean": t(6.0)}


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(("field", "value"), [("tau", 0.0), ("tau", 1.5), ("beta", 0), ("weighting", "equal")])
def test_options_are_checked(field: str, value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(config(**{"algorithm.name": "fedcac", f"algorithm.{field}": value}))
    assert err.value.field == f"algorithm.{field}" and "\n" not in str(err.value)


def test_a_bad_option_on_the_command_line_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_option_error(tmp_path, capsys, "fedcac", "algorithm.tau=1.5") == (2, ["chillfl: error: algorithm.tau: must be in (0, 1], got 1.5"], False)


def test_privacy_dp_sgd_bounds_the_upload_and_the_weighted_mechanisms_refuse() -> None:
    pytest.importorskip("opacus")
    private = {"privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.5, "privacy.delta": 1e-3, "model.name": "mlp", "algorithm.name": "fedcac"}
    # the client trains once and sends its model only; the mask is the server's, from that model: dp-sgd runs
    assert build_experiment(config(**private, **{"privacy.mechanism": "dp-sgd"})).aggregator is not None
    with pytest.raises(ConfigError) as err:  # customised starts are no weighted mean to clip and noise
        build_experiment(config(**private, **{"privacy.mechanism": "dp-fedavg"}))
    assert err.value.field == "privacy.mechanism" and "takes no external per-client weights" in err.value.message


# ---------------------------------------------------------------- a replayed round, executors, resume


def test_a_run_replays_the_masks_overlaps_and_starts_of_its_first_round() -> None:
    """After round 0 (every client sent the initial model), recompute each stored mask, the overlaps, the threshold and
    the next start with plain loops and sorts, and compare with what the run's server holds and sends."""
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor
    from chillfl.protocols.parameters import ParameterSharing

    cfg = config(**{"algorithm.name": "fedcac", "model.name": "mlp", "algorithm.beta": 3, "federation.clients_per_round": 4})
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    start = {k: v.clone() for k, v in protocol.state.items()}
    executor = make_executor(exp, protocol)
    try:
        first = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=4, clients_per_round=4, rounds=1))
        agg = exp.aggregator
        assert isinstance(agg, FedCAC) and "agg_threshold" not in first[0]  # round 0 sends no customised start
        keys = [n for n, _ in exp.model.named_parameters()]
        masks: dict[int, list[bool]] = {}
        for c in range(4):
            bits: list[bool] = []
            for k in keys:
                after, before = agg.models[c][k].reshape(-1).numpy(), start[k].reshape(-1).numpy()
                s = np.abs((after - before) * after).tolist()  # float32, as the run's tensors
                top = sorted(s, reverse=True)[int(0.5 * len(s)) - 1]
                assert top > 1e-10  # the plain case: the threshold is the tau-th largest
                assert agg.masks[c][k].reshape(-1).tolist() == [v >= top for v in s]
                bits += [v >= top for v in s]
            masks[c] = bits
        rate = {(i, j): 1 - sum(a != b for a, b in zip(masks[i], masks[j])) / (2 * sum(masks[i])) for i in range(4) for j in range(4) if i != j}
        mean, largest = sum(rate.values()) / 12, max(rate.values())
        eps = mean + 1 / 3 * (largest - mean)  # one round done, beta 3
        glob = protocol.state
        groups = []
        for i in range(4):
            group = [i] + [j for j in range(4) if j != i and rate[i, j] >= eps]
            groups.append(group)
            assert agg.collaborators(i, 1)[0] == group[1:]
            sent = agg.downlink(i, 1, glob).params
            assert sent is not None
            for k in keys:
                mean_k = sum(agg.models[j][k].double() for j in group) / len(group)
                torch.testing.assert_close(sent[k], torch.where(agg.masks[i][k], mean_k.float(), glob[k]), rtol=0, atol=0)
        second = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=4, clients_per_round=4, rounds=2, start=1))
    finally:
        executor.close()
    assert second[0]["agg_threshold"] == pytest.approx(eps, rel=1e-12)
    assert second[0]["agg_collaborators"] == pytest.approx(sum(len(g) - 1 for g in groups) / 4, rel=1e-12)


@pytest.mark.slow  # three runs, one of them in a process pool
def test_runs_agree_across_executors_and_local_accuracy_is_the_clients_trained_models() -> None:
    from chillfl.engine.loop import run_rounds
    from chillfl.experiment import build_protocol, make_executor
    from chillfl.protocols.common import mean_or_none
    from chillfl.protocols.parameters import ParameterSharing

    cfg = config(**{"algorithm.name": "fedcac", "model.name": "mlp", "algorithm.beta": 2})
    seq = assert_executors_agree(cfg)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[-1]["local_loss"] != fedavg[-1]["local_loss"]
    assert all("agg_collaborators" in r and "agg_threshold" in r for r in seq[1:])  # from round 1 on, starts are customised
    exp = build_experiment(cfg)
    protocol = build_protocol(exp)
    assert isinstance(protocol, ParameterSharing)
    executor = make_executor(exp, protocol)
    try:
        last = list(run_rounds(protocol, executor, seed=cfg.seed, num_clients=exp.data.num_clients, clients_per_round=3, rounds=3))[-1]
    finally:
        executor.close()
    accs = []
    agg = exp.aggregator
    assert isinstance(agg, FedCAC)
    for cid in last["clients"]:
        state = protocol.store.load(cid)
        assert state is not None
        own = {k[len(PREFIX):]: v for k, v in state.items() if k.startswith(PREFIX)}
        assert all(torch.equal(own[k], agg.models[cid][k]) for k in agg.param_keys)  # what it keeps is what it uploaded
        data = protocol.evaluation.client_data(cid)
        assert data.x_eval is not None and data.y_eval is not None
        accs.append(evaluate(exp.model, own, data.x_eval, data.y_eval, cfg.eval.batch_size)[0])
    assert last["local_acc"] == mean_or_none(accs)


def test_resume_is_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "fedcac", "model.name": "mlp", "algorithm.beta": 2})
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


def test_resume_is_bitwise_when_measured_after_the_average(tmp_path: Path) -> None:
    # the server's round counter (rounds_done) comes back from the checkpoint, so the measured starts do too
    cfg = config(**{"algorithm.name": "fedcac", "model.name": "mlp", "algorithm.beta": 2, "algorithm.local_eval": "averaged", "eval.clients": "all"})
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)

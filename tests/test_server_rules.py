"""Server-side rules FedAvgM, q-FFL and FedExP: each update on hand-worked values, state round trips, and end to end.

Models are one or two scalars (``w``) so that every step is a line of arithmetic in the comments.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, Trained
from chillfl.aggregation.fedavgm import FedAvgM, FedAvgMOptions
from chillfl.aggregation.fedexp import FedExP, FedExPOptions, fedexp_step
from chillfl.aggregation.qffl import LOSS, Qffl, QfflClient, QfflOptions
from chillfl.errors import ConfigError
from chillfl.aggregation.registry import make_aggregator
from methods_e2e import assert_executors_agree, config, records, resumed_records


def result(cid: int, w: list[float], n: int = 1, lr: float = 0.1, **report: float) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor(w)}, n, 1, lr, 1.0, 0.0, dict(report))


def close(actual: torch.Tensor, *expected: float) -> None:
    torch.testing.assert_close(actual.flatten(), torch.tensor(expected, dtype=actual.dtype))


# ---------------------------------------------------------------- FedAvgM


def test_fedavgm_momentum_by_hand() -> None:
    agg = FedAvgM(FedAvgMOptions(beta=0.9, server_lr=1.0), ["w"])
    # round 0: w = 1; clients 0.0 (n=1) and 0.5 (n=3): avg = 0.25*0 + 0.75*0.5 = 0.375
    # Delta = 1 - 0.375 = 0.625; v = 0.625; w = 1 - 0.625 = 0.375
    w1 = agg.aggregate({"w": torch.tensor([1.0])}, [result(0, [0.0], 1), result(1, [0.5], 3)], 0)
    close(w1["w"], 0.375)
    # round 1: both clients at 0.25: Delta = 0.375 - 0.25 = 0.125; v = 0.9*0.625 + 0.125 = 0.6875; w = 0.375 - 0.6875 = -0.3125
    state = agg.state_dict()
    w2 = agg.aggregate(w1, [result(0, [0.25], 1), result(1, [0.25], 3)], 1)
    close(w2["w"], -0.3125)
    resumed = FedAvgM(FedAvgMOptions(beta=0.9, server_lr=1.0), ["w"])
    resumed.load_state_dict(state)
    assert torch.equal(resumed.aggregate(w1, [result(0, [0.25], 1), result(1, [0.25], 3)], 1)["w"], w2["w"])


def test_fedavgm_nesterov_by_hand() -> None:
    """``nesterov = true`` is torch's SGD(lr, momentum=beta, nesterov=True) with Delta as the gradient (FL-bench's server)."""
    agg = FedAvgM(FedAvgMOptions(beta=0.9, server_lr=1.0, nesterov=True), ["w"])
    # round 0 as above: Delta = 0.625, v = 0.625; step = Delta + 0.9 v = 1.1875; w = 1 - 1.1875 = -0.1875
    w1 = agg.aggregate({"w": torch.tensor([1.0])}, [result(0, [0.0], 1), result(1, [0.5], 3)], 0)
    close(w1["w"], -0.1875)
    # round 1: both clients at 0.25: Delta = -0.1875 - 0.25 = -0.4375; v = 0.9*0.625 - 0.4375 = 0.125;
    # step = -0.4375 + 0.9*0.125 = -0.325; w = -0.1875 + 0.325 = 0.1375
    close(agg.aggregate(w1, [result(0, [0.25], 1), result(1, [0.25], 3)], 1)["w"], 0.1375)
    # against torch's own Nesterov SGD, three rounds of a weight every client moves by -1 (server_lr 0.5)
    agg = FedAvgM(FedAvgMOptions(beta=0.9, server_lr=0.5, nesterov=True), ["w"])
    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    sgd = torch.optim.SGD([p], lr=0.5, momentum=0.9, nesterov=True)
    w = {"w": torch.zeros(1, dtype=torch.float64)}
    for rnd in range(3):
        w = agg.aggregate(w, [ClientResult(0, {"w": w["w"] - 1.0}, 1, 1, 0.1, 1.0, 0.0, {})], rnd)
        p.grad = torch.ones(1, dtype=torch.float64)
        sgd.step()
        torch.testing.assert_close(w["w"], p.detach())


def test_fedavgm_server_lr_scales_and_zero_momentum_is_fedavg() -> None:
    # server_lr = 0.5: w = 1 - 0.5 * 0.625 = 0.6875
    agg = FedAvgM(FedAvgMOptions(beta=0.9, server_lr=0.5), ["w"])
    close(agg.aggregate({"w": torch.tensor([1.0])}, [result(0, [0.0], 1), result(1, [0.5], 3)], 0)["w"], 0.6875)
    plain = FedAvgM(FedAvgMOptions(beta=0.0, server_lr=1.0), ["w"])
    w = {"w": torch.tensor([1.0])}
    for rnd in range(2):  # beta = 0, lr = 1: w <- w - (w - avg) = avg, every round
        w = plain.aggregate(w, [result(0, [0.0], 1), result(1, [0.5], 3)], rnd)
        close(w["w"], 0.375)


def test_fedavgm_buffers_are_averaged_and_weights_are_taken() -> None:
    agg = FedAvgM(FedAvgMOptions(), ["w"])
    g = {"w": torch.tensor([1.0]), "bn.mean": torch.tensor([0.0]), "bn.n": torch.tensor(3)}
    a = ClientResult(0, {"w": torch.tensor([0.0]), "bn.mean": torch.tensor([2.0]), "bn.n": torch.tensor(5)}, 1, 1, 0.1, 1.0, 0.0)
    b = ClientResult(1, {"w": torch.tensor([1.0]), "bn.mean": torch.tensor([4.0]), "bn.n": torch.tensor(4)}, 1, 1, 0.1, 1.0, 0.0)
    out = agg.aggregate(g, [a, b], 0, weights=torch.tensor([0.25, 0.75], dtype=torch.float64))
    # avg w = 0.75; Delta = 0.25; w = 1 - 0.25 = 0.75; bn.mean = 0.25*2 + 0.75*4 = 3.5; bn.n = max(5, 4)
    close(out["w"], 0.75)
    close(out["bn.mean"], 3.5)
    assert int(out["bn.n"]) == 5


def test_fedavgm_integer_buffers_take_the_max_without_param_keys() -> None:
    # param_keys unset, server_lr = 0.5, p = (0.25, 0.75): w: avg 0.75, w = 1 - 0.5 * (1 - 0.75) = 0.875;
    # bn.mean is floating, so it is stepped too: 0 - 0.5 * (0 - 3.5) = 1.75; bn.n takes the max, 5, and has no v
    # (stepped, it would be 3 - 0.5 * (3 - 5) = 4)
    agg = FedAvgM(FedAvgMOptions(server_lr=0.5))
    g = {"w": torch.tensor([1.0]), "bn.mean": torch.tensor([0.0]), "bn.n": torch.tensor(3)}
    a = ClientResult(0, {"w": torch.tensor([0.0]), "bn.mean": torch.tensor([2.0]), "bn.n": torch.tensor(5)}, 1, 1, 0.1, 1.0, 0.0)
    b = ClientResult(1, {"w": torch.tensor([1.0]), "bn.mean": torch.tensor([4.0]), "bn.n": torch.tensor(4)}, 3, 1, 0.1, 1.0, 0.0)
    out = agg.aggregate(g, [a, b], 0)
    close(out["w"], 0.875)
    close(out["bn.mean"], 1.75)
    assert out["bn.n"].dtype == torch.int64 and int(out["bn.n"]) == 5
    assert set(agg.v) == {"w", "bn.mean"}


# ---------------------------------------------------------------- q-FFL


def qffl_case(q: float) -> torch.Tensor:
    # w^t = [1, 0], lr = 0.1 -> L = 10; client A: w_A = [0.9, 0], F_A = 2; client B: w_B = [1, 0.2], F_B = 0.5
    # Delta_A = 10 ([1,0] - [0.9,0]) = [1, 0], ||.||^2 = 1; Delta_B = 10 ([1,0] - [1,0.2]) = [0, -2], ||.||^2 = 4
    agg = Qffl(QfflOptions(q=q), ["w"])
    out = agg.aggregate({"w": torch.tensor([1.0, 0.0])}, [result(0, [0.9, 0.0], **{LOSS: 2.0}), result(1, [1.0, 0.2], **{LOSS: 0.5})], 0)
    return out["w"]


def test_qffl_step_by_hand_q1() -> None:
    # q = 1: h_A = 1 * 1 + 10 * 2 = 21; h_B = 1 * 4 + 10 * 0.5 = 9; sum h = 30
    # sum F^q Delta = 2 [1, 0] + 0.5 [0, -2] = [2, -1]; w = [1, 0] - [2, -1] / 30 = [1 - 1/15, 1/30]
    torch.testing.assert_close(qffl_case(1.0), torch.tensor([1 - 1 / 15, 1 / 30]), rtol=1e-6, atol=1e-7)


def test_qffl_step_by_hand_q2() -> None:
    # q = 2: F^2 = 4 and 0.25; h_A = 2 * 2 * 1 + 10 * 4 = 44; h_B = 2 * 0.5 * 4 + 10 * 0.25 = 6.5; sum h = 50.5
    # sum F^2 Delta = 4 [1, 0] + 0.25 [0, -2] = [4, -0.5]; w = [1 - 4/50.5, 0.5/50.5]
    torch.testing.assert_close(qffl_case(2.0), torch.tensor([1 - 4 / 50.5, 0.5 / 50.5]), rtol=1e-6, atol=1e-7)


def test_qffl_with_q0_is_the_plain_mean() -> None:
    # q = 0: h = 10 each, sum 20; sum Delta = [1, -2]; w = [1 - 0.05, 0.1] = mean([0.9, 0], [1, 0.2])
    torch.testing.assert_close(qffl_case(0.0), torch.tensor([0.95, 0.1]), rtol=1e-6, atol=1e-7)


def test_qffl_fixed_lipschitz() -> None:
    # L = 20 instead of 1/lr = 10, q = 1: Delta_A = [2, 0] (|.|^2 4), Delta_B = [0, -4] (16)
    # h_A = 4 + 20 * 2 = 44; h_B = 16 + 20 * 0.5 = 26; sum 70; sum F Delta = [4, -2]; w = [1 - 4/70, 2/70]
    agg = Qffl(QfflOptions(q=1.0, lipschitz=20.0), ["w"])
    out = agg.aggregate({"w": torch.tensor([1.0, 0.0])}, [result(0, [0.9, 0.0], **{LOSS: 2.0}), result(1, [1.0, 0.2], **{LOSS: 0.5})], 0)
    torch.testing.assert_close(out["w"], torch.tensor([1 - 4 / 70, 2 / 70]), rtol=1e-6, atol=1e-7)


def test_qffl_large_q_does_not_overflow() -> None:
    # q = 1000, one client, F = 2.3: F^q = 10^361 overflows a float (the old code raised OverflowError).
    # F^q cancels: w = w^t - Delta / (q ||Delta||^2 / F + L) = 1 - 1 / (1000 / 2.3 + 10); the metric is inf, not an error
    agg = Qffl(QfflOptions(q=1000.0), ["w"])
    out = agg.aggregate({"w": torch.tensor([1.0, 0.0])}, [result(0, [0.9, 0.0], **{LOSS: 2.3})], 0)
    torch.testing.assert_close(out["w"], torch.tensor([1 - 1 / (1000 / 2.3 + 10), 0.0]), rtol=1e-6, atol=1e-7)
    assert agg.round_metrics()["qffl_h"] == math.inf


def test_qffl_small_losses_with_large_q_do_not_underflow_to_nan() -> None:
    # q = 150, F_A = F_B = 1e-3: F^q = 1e-450 underflows to 0 for both (the old code: 0 / 0, a NaN model).
    # Shares equal: h_A / F^q = 150 * 1 / 1e-3 + 10 = 150010, h_B / F^q = 150 * 4 / 1e-3 + 10 = 600010, sum 750020;
    # sum Delta = [1, -2]: w = [1 - 1/750020, 2/750020]
    agg = Qffl(QfflOptions(q=150.0), ["w"])
    g = {"w": torch.tensor([1.0, 0.0])}
    out = agg.aggregate(g, [result(0, [0.9, 0.0], **{LOSS: 1e-3}), result(1, [1.0, 0.2], **{LOSS: 1e-3})], 0)
    torch.testing.assert_close(out["w"], torch.tensor([1 - 1 / 750020, 2 / 750020]), rtol=1e-6, atol=1e-9)
    assert math.isfinite(float(agg.round_metrics()["qffl_h"]))


def test_qffl_large_q_with_spread_losses_scales_by_the_largest_loss() -> None:
    # q = 200, F_A = e^5, F_B = 1 (qffl_case's clients): the step divides by max_k F_k^q, so F_B^q / F_A^q = e^-1000 = 0.0 and
    # client A alone steps: w = [1, 0] - [1, 0] / (200 * 1 / e^5 + 10); dividing by the smallest, e^1000, would overflow
    agg = Qffl(QfflOptions(q=200.0), ["w"])
    out = agg.aggregate({"w": torch.tensor([1.0, 0.0])}, [result(0, [0.9, 0.0], **{LOSS: math.exp(5)}), result(1, [1.0, 0.2], **{LOSS: 1.0})], 0)
    torch.testing.assert_close(out["w"], torch.tensor([1 - 1 / (200 / math.exp(5) + 10), 0.0]), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize(("q", "expected"), [(1022, 2.0**1022), (1023, 2.0**1023), (1024, math.inf)])
def test_qffl_h_reads_inf_only_past_the_largest_float(q: int, expected: float) -> None:
    # one client that did not move (Delta = 0), F = 2, L = 1: sum_k h_k = F^q (q * 0 / F + L) = (2 + 1e-10)^q, so
    # ln h = q ln(2 + 1e-10) = q (0.6931471806 + 5e-11): q = 1022 -> 708.40 (h = 2^1022 (1 + 5.1e-8) = 4.49e307);
    # q = 1023 -> 709.09 (h = 2^1023 (1 + 5.1e-8) = 8.99e307, a float still: the largest is 1.80e308 = e^709.7827,
    # which the old cutoff ln h < 709 read as inf); q = 1024 -> 709.782712945 > ln(1.80e308) = 709.782712893: inf
    agg = Qffl(QfflOptions(q=float(q), lipschitz=1.0), ["w"])
    out = agg.aggregate({"w": torch.tensor([1.0, 0.0])}, [result(0, [1.0, 0.0], **{LOSS: 2.0})], 0)
    close(out["w"], 1.0, 0.0)  # Delta = 0: the model stays
    assert agg.round_metrics()["qffl_h"] == pytest.approx(expected, rel=1e-6)


def test_qffl_zero_loss_stays_finite_through_the_authors_tiny() -> None:
    # q = 0.5, L = 10; client A: F_A = 0, w_A = w^t (Delta_A = 0); client B: F_B = 1, Delta_B = [0, -2], ||.||^2 = 4
    # F_A + 1e-10: F_A^q = 1e-5, h_A = 0.5 * 1e-10^-0.5 * 0 + 10 * 1e-5 = 1e-4; h_B = 0.5 * 1 * 4 + 10 * 1 = 12
    # w = [1, 0] - 1 * [0, -2] / 12.0001 = [1, 2 / 12.0001]   (without the 1e-10, ln 0 or 0^-0.5 fails)
    agg = Qffl(QfflOptions(q=0.5), ["w"])
    out = agg.aggregate({"w": torch.tensor([1.0, 0.0])}, [result(0, [1.0, 0.0], **{LOSS: 0.0}), result(1, [1.0, 0.2], **{LOSS: 1.0})], 0)
    torch.testing.assert_close(out["w"], torch.tensor([1.0, 2 / 12.0001]), rtol=1e-6, atol=1e-9)


def test_qffl_buffers_integer_buffers_and_metrics_by_hand() -> None:
    # qffl_case's clients at q = 1 (w = [1 - 1/15, 1/30], sum h = 30) with n = (1, 3), a float buffer (2, 4), an integer one (5, 4)
    # buffers: bn.mean = 0.25 * 2 + 0.75 * 4 = 3.5 (sample shares); bn.n = max(5, 4) = 5; losses (2, 0.5): mean 1.25, max 2
    def case(with_mean: bool) -> list[ClientResult]:
        extra = [{"bn.mean": torch.tensor([2.0])}, {"bn.mean": torch.tensor([4.0])}] if with_mean else [{}, {}]
        return [ClientResult(0, {"w": torch.tensor([0.9, 0.0]), "bn.n": torch.tensor(5), **extra[0]}, 1, 1, 0.1, 1.0, 0.0, {LOSS: 2.0}),
                ClientResult(1, {"w": torch.tensor([1.0, 0.2]), "bn.n": torch.tensor(4), **extra[1]}, 3, 1, 0.1, 1.0, 0.0, {LOSS: 0.5})]

    expected = torch.tensor([1 - 1 / 15, 1 / 30])
    agg = Qffl(QfflOptions(q=1.0), ["w"])
    out = agg.aggregate({"w": torch.tensor([1.0, 0.0]), "bn.mean": torch.tensor([0.0]), "bn.n": torch.tensor(3)}, case(True), 0)
    torch.testing.assert_close(out["w"], expected, rtol=1e-6, atol=1e-7)
    close(out["bn.mean"], 3.5)
    assert out["bn.n"].dtype == torch.int64 and int(out["bn.n"]) == 5
    metrics = agg.round_metrics()
    assert metrics["qffl_mean_loss"] == pytest.approx(1.25) and metrics["qffl_max_loss"] == pytest.approx(2.0)
    assert metrics["qffl_h"] == pytest.approx(30.0)
    # param_keys unset: every floating key is stepped, the integer buffer still takes the max and stays out of ||Delta||^2
    out = Qffl(QfflOptions(q=1.0)).aggregate({"w": torch.tensor([1.0, 0.0]), "bn.n": torch.tensor(3)}, case(False), 0)
    torch.testing.assert_close(out["w"], expected, rtol=1e-6, atol=1e-7)
    assert out["bn.n"].dtype == torch.int64 and int(out["bn.n"]) == 5


def test_qffl_reads_a_one_element_tensor_loss_and_refuses_a_missing_one() -> None:
    # test_qffl_step_by_hand_q1 with F_A = 2 sent as a tensor: the same step, [1 - 1/15, 1/30]
    agg = Qffl(QfflOptions(q=1.0), ["w"])
    out = agg.aggregate({"w": torch.tensor([1.0, 0.0])}, [result(0, [0.9, 0.0], **{LOSS: torch.tensor(2.0)}),  # type: ignore[arg-type]
                                                          result(1, [1.0, 0.2], **{LOSS: 0.5})], 0)
    torch.testing.assert_close(out["w"], torch.tensor([1 - 1 / 15, 1 / 30]), rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="qffl_loss.*client 1"):
        agg.aggregate({"w": torch.tensor([1.0, 0.0])}, [result(0, [0.9, 0.0], **{LOSS: 2.0}), result(1, [1.0, 0.2])], 0)


def test_qffl_client_reports_the_loss_of_the_model_it_received() -> None:
    # Linear(2, 2) with zero weights: both logits 0, so the cross-entropy is ln 2 on every sample
    model = nn.Linear(2, 2)
    received = {"weight": torch.zeros(2, 2), "bias": torch.zeros(2)}
    trained = {"weight": torch.eye(2) * 5, "bias": torch.zeros(2)}  # the trained model would score another loss
    x, y = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), torch.tensor([0, 1, 1])
    done = Trained(0, x, y, received, {}, {}, 0.1, 1.0, trained, 1)
    state, report = QfflClient().finish(model, {}, done)
    assert state == {}
    assert report[LOSS] == pytest.approx(math.log(2), rel=1e-6)


# ---------------------------------------------------------------- FedExP


def test_fedexp_extrapolates_by_hand() -> None:
    # w^t = [0, 0]; Delta_1 = [1, 0], Delta_2 = [0, 1], Delta_3 = [-1, 0] (M = 3; sample counts do not matter)
    # mean = [0, 1/3], ||mean||^2 = 1/9; sum ||Delta_i||^2 = 3
    # eta = max(1, 3 / (2 * 3 * (1/9 + 1e-3))) = 0.5 / 0.112111... = 4.45986...; w = -eta [0, 1/3]
    agg = FedExP(FedExPOptions(), ["w"])
    assert agg.round_metrics() == {}  # no eta_g before a round
    out = agg.aggregate({"w": torch.tensor([0.0, 0.0])}, [result(0, [-1.0, 0.0], 5), result(1, [0.0, -1.0], 1), result(2, [1.0, 0.0], 2)], 0)
    eta = 3 / (2 * 3 * (1 / 9 + 1e-3))
    assert agg.round_metrics()["fedexp_eta"] == pytest.approx(eta, rel=1e-12)
    torch.testing.assert_close(out["w"], torch.tensor([0.0, -eta / 3]), rtol=1e-6, atol=1e-7)


def test_fedexp_step_defaults_to_the_plain_mean_and_integer_buffers_take_the_max() -> None:
    # test_fedexp_extrapolates_by_hand's clients: fedexp_step without weights is the paper's 1/M, eta = 3 / (2 * 3 * (1/9 + 1e-3))
    eta = 3 / (2 * 3 * (1 / 9 + 1e-3))
    g = {"w": torch.tensor([0.0, 0.0]), "bn.n": torch.tensor(3)}
    models = [{"w": torch.tensor([-1.0, 0.0]), "bn.n": torch.tensor(5)}, {"w": torch.tensor([0.0, -1.0]), "bn.n": torch.tensor(4)},
              {"w": torch.tensor([1.0, 0.0]), "bn.n": torch.tensor(2)}]
    step, got = fedexp_step(g, models, 1e-3, ["w"])
    assert got == pytest.approx(eta, rel=1e-12)
    torch.testing.assert_close(step["w"], torch.tensor([0.0, -eta / 3]), rtol=1e-6, atol=1e-7)
    # param_keys unset: the integer buffer stays out of the norms and the step, and takes the max, 5
    out = FedExP(FedExPOptions()).aggregate(g, [ClientResult(i, m, 1, 1, 0.1, 1.0, 0.0) for i, m in enumerate(models)], 0)
    torch.testing.assert_close(out["w"], torch.tensor([0.0, -eta / 3]), rtol=1e-6, atol=1e-7)
    assert out["bn.n"].dtype == torch.int64 and int(out["bn.n"]) == 5


def test_fedexp_samples_weighting_is_the_authors_code() -> None:
    # the same clients, weighted by samples (the authors' main.py): p = [5/8, 1/8, 2/8]
    # mean = 5/8 [1, 0] + 1/8 [0, 1] + 2/8 [-1, 0] = [3/8, 1/8], ||.||^2 = 10/64; sum p_i ||Delta_i||^2 = 1
    # eta = max(1, 1 / (2 (10/64 + 1e-3))) = 3.17965...; w = -eta [3/8, 1/8]
    agg = FedExP(FedExPOptions(weighting="samples"), ["w"])
    out = agg.aggregate({"w": torch.tensor([0.0, 0.0])}, [result(0, [-1.0, 0.0], 5), result(1, [0.0, -1.0], 1), result(2, [1.0, 0.0], 2)], 0)
    eta = 1 / (2 * (10 / 64 + 1e-3))
    assert agg.round_metrics()["fedexp_eta"] == pytest.approx(eta, rel=1e-12)
    torch.testing.assert_close(out["w"], torch.tensor([-eta * 3 / 8, -eta / 8]), rtol=1e-6, atol=1e-7)


def test_fedexp_eps_times_clients_is_the_authors_code() -> None:
    # as test_fedexp_extrapolates_by_hand with S * eps = 3e-3 in the denominator: eta = 0.5 / (1/9 + 3e-3)
    agg = FedExP(FedExPOptions(eps_times_clients=True), ["w"])
    out = agg.aggregate({"w": torch.tensor([0.0, 0.0])}, [result(0, [-1.0, 0.0], 5), result(1, [0.0, -1.0], 1), result(2, [1.0, 0.0], 2)], 0)
    eta = 0.5 / (1 / 9 + 3e-3)
    assert agg.round_metrics()["fedexp_eta"] == pytest.approx(eta, rel=1e-12)
    torch.testing.assert_close(out["w"], torch.tensor([0.0, -eta / 3]), rtol=1e-6, atol=1e-7)


def test_fedexp_eps_decays_by_round_as_the_authors_code() -> None:
    # the clients of test_fedexp_extrapolates_by_hand: sum ||Delta_i||^2 = 3, M = 3, ||mean||^2 = 1/9.
    # eps_decay = 0.5, eps = 0.1: round 0 eps 0.1, round 3 eps 0.1 * 0.125 = 0.0125; with eps_times_clients 3 * 0.0125
    clients = [result(0, [-1.0, 0.0], 5), result(1, [0.0, -1.0], 1), result(2, [1.0, 0.0], 2)]
    for times_clients, rnd, eps in ((False, 0, 0.1), (False, 3, 0.0125), (True, 3, 0.0375)):
        agg = FedExP(FedExPOptions(eps=0.1, eps_decay=0.5, eps_times_clients=times_clients), ["w"])
        agg.aggregate({"w": torch.tensor([0.0, 0.0])}, clients, rnd)
        assert agg.round_metrics()["fedexp_eta"] == pytest.approx(3 / (2 * 3 * (1 / 9 + eps)), rel=1e-12)
    with pytest.raises(ConfigError, match=r"^algorithm\.eps_decay: must be in \(0, 1\]"):
        FedExPOptions(eps_decay=1.5).validate("algorithm")


def test_fedexp_step_is_never_below_fedavgs() -> None:
    # Delta_1 = [1, 0], Delta_2 = [0, 1]: mean [0.5, 0.5], ||.||^2 = 0.5; sum 2; 2 / (4 * 0.501) = 0.998 < 1 -> eta = 1 (FedAvg)
    agg = FedExP(FedExPOptions(), ["w"])
    out = agg.aggregate({"w": torch.tensor([0.0, 0.0])}, [result(0, [-1.0, 0.0]), result(1, [0.0, -1.0])], 0)
    assert agg.round_metrics()["fedexp_eta"] == 1.0
    close(out["w"], -0.5, -0.5)


def test_fedexp_average_of_the_last_two_iterates() -> None:
    agg = FedExP(FedExPOptions(average_last_two=True), ["w"])
    g0 = {"w": torch.tensor([0.0, 0.0])}
    assert agg.downlink(0, 0, g0).params is None  # round 0: the clients start from the global model
    # eta = 1 (as above): w^1 = [-0.5, -0.5]; the global model is (w^1 + w^0) / 2 = [-0.25, -0.25]
    g1 = agg.aggregate(g0, [result(0, [-1.0, 0.0]), result(1, [0.0, -1.0])], 0)
    close(g1["w"], -0.25, -0.25)
    sent = agg.downlink(0, 1, g1).params
    assert sent is not None
    close(sent["w"], -0.5, -0.5)  # the clients train from w^1, not from the average
    state = agg.state_dict()
    # round 1 from w^1: Deltas [1, 0] and [0, 1] again: w^2 = [-1, -1]; global (w^2 + w^1) / 2 = [-0.75, -0.75]
    trained = [result(0, [-1.5, -0.5]), result(1, [-0.5, -1.5])]
    g2 = agg.aggregate(g1, trained, 1)
    close(g2["w"], -0.75, -0.75)
    resumed = FedExP(FedExPOptions(average_last_two=True), ["w"])
    resumed.load_state_dict(state)
    assert torch.equal(resumed.aggregate(g1, trained, 1)["w"], g2["w"])


# ---------------------------------------------------------------- options, end to end


@pytest.mark.parametrize(
    "name, options, field",
    [
        ("fedavgm", {"beta": 1.0}, "algorithm.beta"),
        ("fedavgm", {"server_lr": 0.0}, "algorithm.server_lr"),
        ("qffl", {"q": -1.0}, "algorithm.q"),
        ("qffl", {"lipschitz": 0.0}, "algorithm.lipschitz"),
        ("fedexp", {"eps": 0.0}, "algorithm.eps"),
    ],
)
def test_bad_options_name_the_field(name: str, options: dict[str, float], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        make_aggregator(name, options, num_clients=2, model=nn.Linear(1, 1), seed=0)
    assert info.value.field == field


@pytest.mark.parametrize("name", ["fedavgm", "qffl", "fedexp"])
def test_differs_from_fedavg_and_agrees_across_executors(name: str) -> None:
    extra = {"algorithm.average_last_two": True} if name == "fedexp" else {}
    cfg = config(**{"algorithm.name": name, "federation.rounds": 2, "model.name": "mlp", **extra})
    seq = assert_executors_agree(cfg)
    fedavg = records(cfg.with_overrides({"algorithm": {"name": "fedavg"}}))
    assert seq[-1]["global_loss"] != fedavg[-1]["global_loss"]


def test_fedexp_average_resumes_bitwise(tmp_path: Path) -> None:
    cfg = config(**{"algorithm.name": "fedexp", "algorithm.average_last_two": True, "model.name": "mlp"})
    assert resumed_records(cfg, 2, tmp_path) == records(cfg)


# ---------------------------------------------------------------- frozen weights carry no per-parameter state


def frozen_model() -> nn.Module:
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 2))
    model[0].requires_grad_(False)  # reaches training as LocalSpec.frozen: never moves
    return model


@pytest.mark.parametrize("name", ["vrl_sgd", "feddyn", "fedadam", "fedavgm"])
def test_frozen_weights_get_no_per_parameter_state(name: str) -> None:
    # VRL-SGD kept a Delta_i of zeros per client for the frozen layer (and sent it as downlink context), FedDyn a g_k
    # per client and h, FedOpt/FedAvgM server moments: only the trainable layer "1.*" should carry any
    from chillfl.aggregation.registry import BuildContext, algorithm_spec

    model = frozen_model()
    spec = algorithm_spec(name)
    server, _ = spec.build(spec.options(), BuildContext(num_clients=3, model=model, seed=0, client_momentum=0.0))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trained = {**start, "1.weight": start["1.weight"] + 0.1, "1.bias": start["1.bias"] - 0.1}
    context = server.downlink(0, 0, start).context
    half = server.client_half()
    if half is not None:
        _, context = half.prepare({}, start, {**context, **({"feddyn_alpha": 0.01} if name == "feddyn" else {})})
        x, y = torch.zeros(1, 2), torch.zeros(1, dtype=torch.long)
        state, _ = half.finish(model, {}, Trained(0, x, y, start, {}, context, 0.1, 1.0, trained, 1))
        assert all(not k.endswith(("0.weight", "0.bias")) for k in state)
    tables = [context[k] for k in ("correction", "feddyn_linear") if k in context]  # FedDyn's anchor is the model sent
    assert all(set(t) <= {"1.weight", "1.bias"} for t in tables)
    out = server.aggregate(start, [ClientResult(0, trained, 5, 1, 0.1, 1.0, 0.0)], 0)
    assert torch.equal(out["0.weight"], start["0.weight"]) and torch.equal(out["0.bias"], start["0.bias"])
    saved = repr(server.state_dict())
    assert "0.weight" not in saved and "0.bias" not in saved

"""Aggregation maths of the parameter-sharing baselines, on tiny hand-computed vectors."""

from __future__ import annotations

import logging
import math

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.aggregation.fedbn import FedBN, FedBNOptions, batchnorm_keys
from chillfl.aggregation.fedmut import FedMut, FedMutOptions, balanced_signs
from chillfl.aggregation.fednova import FedNova, FedNovaOptions, effective_steps
from chillfl.aggregation.fedopt import FedAdamOptions, FedOpt, FedOptOptions
from chillfl.aggregation.fedprox import FedProx, FedProxOptions, ProximalTerm
from chillfl.aggregation.pa3fed import PA3Fed
from chillfl.aggregation.registry import algorithm_names, make_aggregator
from chillfl.aggregation.scaffold import LinearCorrectionTerm, Scaffold, ScaffoldOptions, full_batch_gradient
from chillfl.aggregation.vrl_sgd import VRLSGD
from chillfl.errors import ConfigError
from method_round import Clients


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def result(cid: int, n: int = 1, steps: int = 1, lr: float = 0.1, **params: torch.Tensor) -> ClientResult:
    return ClientResult(client_id=cid, params=dict(params), num_samples=n, num_steps=steps, lr=lr, temperature=1.0, train_loss=0.0)


# ---------------------------------------------------------------- FedAvg / FedProx


def test_fedavg_weights_by_sample_count() -> None:
    # n = (1, 3) -> p = (0.25, 0.75); w = 0.25 * 1 + 0.75 * 5 = 4.0
    out = FedAvg().aggregate({"w": t(0.0)}, [result(0, 1, w=t(1.0)), result(1, 3, w=t(5.0))], 0)
    assert out["w"].tolist() == [4.0]


def test_fedavg_of_column_major_client_states_is_contiguous_and_exact() -> None:
    # the vectorised executor hands back views laid out like their gradients (transposed);
    # the average must not depend on that and the new global model is row-major again.
    a = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    stacked = torch.stack([a, 3 * a]).transpose(1, 2).contiguous().transpose(1, 2)  # [2, 2, 3], column-major rows
    assert not stacked[0].is_contiguous()
    out = FedAvg().aggregate({"w": a}, [result(0, 1, w=stacked[0]), result(1, 3, w=stacked[1])], 0)
    # 0.25 * a + 0.75 * 3a = 2.5 a
    assert out["w"].is_contiguous() and out["w"].tolist() == (2.5 * a).tolist()


def test_fedprox_aggregates_like_fedavg_and_accepts_weights() -> None:
    agg = FedProx(FedProxOptions(mu=0.1))
    res = [result(0, 1, w=t(1.0)), result(1, 3, w=t(5.0))]
    assert agg.aggregate({"w": t(0.0)}, res, 0)["w"].tolist() == [4.0]
    # explicit weights (0.5, 0.5): 0.5 * 1 + 0.5 * 5 = 3.0
    assert agg.aggregate({"w": t(0.0)}, res, 0, weights=torch.tensor([0.5, 0.5]))["w"].tolist() == [3.0]


def test_proximal_term_value_and_gradient() -> None:
    agg = FedProx(FedProxOptions(mu=0.5))
    ctx = agg.downlink(3, 0, {"w": t(0.0, 4.0)}).context
    w = t(1.0, 2.0).requires_grad_(True)
    value = ProximalTerm()({"w": w}, ctx)
    # mu/2 * ||w - w_g||^2 = 0.25 * ((1 - 0)^2 + (2 - 4)^2) = 0.25 * 5 = 1.25
    assert value.item() == pytest.approx(1.25)
    (grad,) = torch.autograd.grad(value, w)
    # mu * (w - w_g) = 0.5 * (1, -2) = (0.5, -1.0)
    assert grad.tolist() == pytest.approx([0.5, -1.0])


def test_fedprox_warns_when_mu_is_zero(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        FedProx(FedProxOptions(mu=0.0))
    assert "equivalent to FedAvg" in caplog.text


# ---------------------------------------------------------------- FedNova


def test_fednova_unequal_local_steps() -> None:
    # x = 0; client 0: 1 step to y = -1; client 1: 4 steps to y = -2; n equal -> p = (0.5, 0.5)
    # d = ((0 + 1) / 1, (0 + 2) / 4) = (1, 0.5); tau_eff = 0.5 * 1 + 0.5 * 4 = 2.5
    # x <- 0 - 2.5 * (0.5 * 1 + 0.5 * 0.5) = -1.875   (FedAvg would give -1.5)
    agg = FedNova()
    out = agg.aggregate({"w": t(0.0)}, [result(0, 10, steps=1, w=t(-1.0)), result(1, 10, steps=4, w=t(-2.0))], 0)
    assert out["w"].item() == pytest.approx(-1.875)
    assert agg.round_metrics()["tau_eff"] == pytest.approx(2.5)


def test_fednova_momentum_effective_steps() -> None:
    # Constant gradient, momentum 0.5: step sizes 1, 1.5, 1.75 (b <- 0.5 b + g) -> a(2) = 2.5, a(3) = 4.25
    assert effective_steps(2, 0.5) == pytest.approx(2.5)
    assert effective_steps(3, 0.5) == pytest.approx(4.25)
    assert effective_steps(1, 0.9) == pytest.approx(1.0)
    assert effective_steps(4) == 4.0


def test_fednova_averages_buffers_and_uses_given_weights() -> None:
    agg = FedNova(FedNovaOptions(), param_keys=["w"])
    res = [result(0, 1, steps=1, w=t(-1.0), var=t(1.0)), result(1, 1, steps=4, w=t(-2.0), var=t(3.0))]
    # weights (0.75, 0.25): tau_eff = 0.75 + 1 = 1.75; sum p d = 0.75 * 1 + 0.25 * 0.5 = 0.875
    # w <- -1.75 * 0.875 = -1.53125; buffer var = 0.75 * 1 + 0.25 * 3 = 1.5
    out = agg.aggregate({"w": t(0.0), "var": t(9.0)}, res, 0, weights=torch.tensor([0.75, 0.25], dtype=torch.float64))
    assert out["w"].item() == pytest.approx(-1.53125)
    assert out["var"].item() == pytest.approx(1.5)


def test_fednova_uses_its_momentum_and_takes_the_max_of_integer_buffers() -> None:
    # rho = 0.5: a(1) = 1, a(2) = 1 + 1.5 = 2.5; x = 0, client 0: 1 step to -1, client 1: 2 steps to -2.5; p = (0.5, 0.5)
    # d = (1 / 1, 2.5 / 2.5) = (1, 1); tau_eff = 0.5 * 1 + 0.5 * 2.5 = 1.75; x <- 0 - 1.75 * 1 = -1.75
    # (rho ignored: d = (1, 1.25), tau_eff = 1.5, x = -1.5 * 1.125 = -1.6875); integer buffer count: max(3, 5) = 5
    agg = FedNova(FedNovaOptions(momentum=0.5))
    n = torch.tensor([0])
    res = [result(0, 10, steps=1, w=t(-1.0), count=torch.tensor([3])), result(1, 10, steps=2, w=t(-2.5), count=torch.tensor([5]))]
    out = agg.aggregate({"w": t(0.0), "count": n}, res, 0)
    assert out["w"].item() == pytest.approx(-1.75)
    assert agg.round_metrics()["tau_eff"] == pytest.approx(1.75)
    assert out["count"].dtype == torch.int64 and out["count"].item() == 5
    with pytest.raises(ValueError, match="num_steps >= 1"):
        FedNova().aggregate({"w": t(0.0)}, [result(0, 10, steps=0, w=t(-1.0))], 0)


# ---------------------------------------------------------------- SCAFFOLD


def test_scaffold_control_variates_over_two_rounds() -> None:
    agg = Scaffold(num_clients=4)
    clients = Clients(agg)  # c_i is each client's own state
    x = {"w": t(1.0)}
    assert clients.start(0, 0, x)[1]["correction"]["w"].tolist() == [0.0]
    # Round 0, clients 0 and 1, lr = 0.125:
    #   c_0+ = 0 - 0 + (1 - 0.5) / (2 * 0.125) = 2.0;   c_1+ = (1 - 1.25) / (4 * 0.125) = -0.5
    #   x <- 1 + 1.0 * mean(0.5 - 1, 1.25 - 1) = 1 - 0.125 = 0.875
    #   c <- 0 + (2/4) * mean(2.0, -0.5) = 0.375
    x = agg.aggregate(x, clients.results(0, x, [result(0, steps=2, lr=0.125, w=t(0.5)), result(1, steps=4, lr=0.125, w=t(1.25))]), 0)
    assert x["w"].item() == pytest.approx(0.875)
    assert agg.control["w"].item() == pytest.approx(0.375)
    # corrections c - c_i: client 0: 0.375 - 2 = -1.625, client 1: 0.375 + 0.5 = 0.875, new client 3: 0.375
    assert clients.start(0, 1, x)[1]["correction"]["w"].item() == pytest.approx(-1.625)
    assert clients.start(1, 1, x)[1]["correction"]["w"].item() == pytest.approx(0.875)
    assert clients.start(3, 1, x)[1]["correction"]["w"].item() == pytest.approx(0.375)
    # Round 1, clients 0 and 2 from x = 0.875:
    #   c_0+ = 2 - 0.375 + (0.875 - 0.625) / (2 * 0.125) = 2.625;  c_2+ = 0 - 0.375 + 0 = -0.375
    #   c <- 0.375 + (1/4) * ((2.625 - 2) + (-0.375 - 0)) = 0.4375 = mean(2.625, -0.5, -0.375, 0)
    agg.aggregate(x, clients.results(1, x, [result(0, steps=2, lr=0.125, w=t(0.625)), result(2, steps=1, lr=0.125, w=t(0.875))]), 1)
    assert agg.control["w"].item() == pytest.approx(0.4375)
    assert clients.states[0]["scaffold.c.w"].item() == pytest.approx(2.625)
    assert clients.states[2]["scaffold.c.w"].item() == pytest.approx(-0.375)
    assert agg.state_dict() == {"control": agg.control}  # the server holds c only



def test_scaffold_global_lr_and_momentum_by_hand() -> None:
    # N = 2, eta_g = 2, client momentum 0.5: a(2) = 1 + 1.5 = 2.5, a(3) = 2.5 + 1.75 = 4.25; lr = 0.125
    agg = Scaffold(num_clients=2, options=ScaffoldOptions(global_lr=2.0, momentum=0.5))
    clients = Clients(agg)
    x = {"w": t(1.0)}
    #   c_0+ = 0 - 0 + (1 - 0.5) / (2.5 * 0.125) = 1.6;   c_1+ = (1 - 0.46875) / (4.25 * 0.125) = 1.0
    #   x <- 1 + 2 * mean(0.5 - 1, 0.46875 - 1) = 1 + 2 * (-0.515625) = -0.03125
    #   c <- 0 + (2/2) * mean(1.6, 1.0) = 1.3
    trained = [result(0, steps=2, lr=0.125, w=t(0.5)), result(1, steps=3, lr=0.125, w=t(0.46875))]
    x = agg.aggregate(x, clients.results(0, x, trained), 0)
    assert x["w"].item() == pytest.approx(-0.03125)
    assert clients.states[0]["scaffold.c.w"].item() == pytest.approx(1.6)
    assert clients.states[1]["scaffold.c.w"].item() == pytest.approx(1.0)
    assert agg.control["w"].item() == pytest.approx(1.3)



def test_scaffold_samples_weighting_caller_weights_integer_buffers_and_control_norm() -> None:
    # N = 2, x = 1, one step each at lr = 0.5; client 0 (n = 1) to y = 0, client 1 (n = 3) to y = 4
    #   c_0+ = (1 - 0) / 0.5 = 2;  c_1+ = (1 - 4) / 0.5 = -6;  c <- 0 + (2 - 6) / 2 = -2, so control_norm = |c| = 2
    #   samples: p = (0.25, 0.75), x <- 1 + 0.25 * (0 - 1) + 0.75 * (4 - 1) = 3   (uniform: 1 + 0.5 * (-1 + 3) = 2)
    #   integer buffer count: max(3, 5) = 5, not in c
    def trained() -> list[ClientResult]:
        return [result(0, 1, steps=1, lr=0.5, w=t(0.0), count=torch.tensor([3])), result(1, 3, steps=1, lr=0.5, w=t(4.0), count=torch.tensor([5]))]

    x = {"w": t(1.0), "count": torch.tensor([0])}
    agg = Scaffold(num_clients=2, options=ScaffoldOptions(weighting="samples"))
    out = agg.aggregate(x, Clients(agg).results(0, x, trained()), 0)
    assert out["w"].item() == pytest.approx(3.0)
    assert out["count"].dtype == torch.int64 and out["count"].item() == 5
    assert list(agg.control) == ["w"] and agg.control["w"].item() == pytest.approx(-2.0)
    assert agg.round_metrics()["control_norm"] == pytest.approx(2.0)
    # caller-supplied weights (PA3Fed's) replace p_i: (0.5, 0.5) gives the uniform step, x = 2; c as above
    agg = Scaffold(num_clients=2, options=ScaffoldOptions(weighting="samples"))
    out = agg.aggregate(x, Clients(agg).results(0, x, trained()), 0, weights=torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert out["w"].item() == pytest.approx(2.0)
    assert agg.control["w"].item() == pytest.approx(-2.0)
    agg = Scaffold(num_clients=2)  # uniform (the paper's)
    assert agg.aggregate(x, Clients(agg).results(0, x, trained()), 0)["w"].item() == pytest.approx(2.0)
    # option II divides by K lr: a client that took no step, or trained at lr 0, is refused, not divided by zero
    for steps, lr in ((0, 0.5), (1, 0.0)):
        with pytest.raises(ValueError, match="num_steps >= 1 and lr > 0"):
            Clients(agg).results(0, x, [result(0, 1, steps=steps, lr=lr, w=t(0.0), count=torch.tensor([3]))])


def test_scaffold_option_i_sets_c_i_to_the_full_batch_gradient_at_x_by_hand() -> None:
    # Linear(1 -> 2) at zero, x = (1, 2), y = (0, 1), T = 2: logits 0, softmax (0.5, 0.5);
    # dCE/dz = (p - e_y) / T: sample 0 (-0.25, 0.25), sample 1 (0.25, -0.25) times x = 2 -> (0.5, -0.5)
    # g_W = mean = ((-0.25 + 0.5) / 2, (0.25 - 0.5) / 2) = (0.125, -0.125); g_b = mean of the two = 0
    model = nn.Linear(1, 2)
    x0 = {"weight": torch.zeros(2, 1), "bias": torch.zeros(2)}
    xs, ys = torch.tensor([[1.0], [2.0]]), torch.tensor([0, 1])
    for batch_size in (1, 1024):
        g = full_batch_gradient(model, x0, xs, ys, 2.0, batch_size)
        assert g["weight"].flatten().tolist() == pytest.approx([0.125, -0.125])
        assert g["bias"].tolist() == pytest.approx([0.0, 0.0])
    agg = Scaffold(num_clients=2, options=ScaffoldOptions(option="I"))
    clients = Clients(agg, model)
    # whatever the trained model (y_i = 7), c_0+ = g_0(x); c <- 0 + (1/2) c_0+ = (0.0625, -0.0625)
    trained = ClientResult(0, {"weight": torch.full((2, 1), 7.0), "bias": torch.zeros(2)}, 2, 3, 0.1, 2.0, 0.0)
    agg.aggregate(x0, clients.results(0, x0, [trained], xs, ys), 0)
    assert clients.states[0]["scaffold.c.weight"].flatten().tolist() == pytest.approx([0.125, -0.125])
    assert agg.control["weight"].flatten().tolist() == pytest.approx([0.0625, -0.0625])
    assert agg.control["bias"].tolist() == pytest.approx([0.0, 0.0])


def test_linear_correction_term_adds_correction_to_gradient() -> None:
    w = t(1.0, 2.0).requires_grad_(True)
    value = LinearCorrectionTerm()({"w": w}, {"correction": {"w": t(3.0, -1.0)}})
    # <w, c> = 1 * 3 + 2 * (-1) = 1; gradient = c = (3, -1)
    assert value.item() == pytest.approx(1.0)
    (grad,) = torch.autograd.grad(value, w)
    assert grad.tolist() == [3.0, -1.0]


# ---------------------------------------------------------------- FedOpt


def _fedopt_two_steps(kind: str) -> list[float]:
    agg = FedOpt(kind, FedOptOptions(server_lr=1.0, beta1=0.9, beta2=0.99, tau=0.5))  # type: ignore[arg-type]
    x1 = agg.aggregate({"w": t(1.0)}, [result(0, w=t(1.5)), result(1, w=t(2.5))], 0)  # Delta = 2 - 1 = 1
    x2 = agg.aggregate(x1, [result(0, w=x1["w"]), result(1, w=x1["w"])], 1)  # Delta = 0
    return [x1["w"].item(), x2["w"].item()]


def test_fedadam_two_steps() -> None:
    # v_{-1} = tau^2 = 0.25; m0 = 0.1 * 1 = 0.1; v0 = 0.99 * 0.25 + 0.01 * 1 = 0.2575
    x1 = 1 + 0.1 / (math.sqrt(0.2575) + 0.5)
    # Delta = 0: m1 = 0.09; v1 = 0.99 * 0.2575 = 0.254925
    x2 = x1 + 0.09 / (math.sqrt(0.254925) + 0.5)
    assert _fedopt_two_steps("adam") == pytest.approx([x1, x2], rel=1e-6)


def test_fedopt_integer_buffers_take_the_max_and_carry_no_moments() -> None:
    # test_fedadam_two_steps' first round, param_keys unset, with an integer buffer count (3; clients 5 and 4): max 5, no m or v
    # (stepped as a parameter it would be 3 + 0.2 / (sqrt(0.99 * 0.25 + 0.01 * 4) + 0.5) = 3.19 -> 3)
    agg = FedOpt("adam", FedOptOptions(server_lr=1.0, beta1=0.9, beta2=0.99, tau=0.5))
    out = agg.aggregate({"w": t(1.0), "count": torch.tensor(3)},
                        [result(0, w=t(1.5), count=torch.tensor(5)), result(1, w=t(2.5), count=torch.tensor(4))], 0)
    assert out["w"].item() == pytest.approx(1 + 0.1 / (math.sqrt(0.2575) + 0.5), rel=1e-6)
    assert out["count"].dtype == torch.int64 and out["count"].item() == 5
    assert set(agg.m) == set(agg.v) == {"w"}


def test_fedyogi_two_steps() -> None:
    # v0 = 0.25 - 0.01 * 1 * sign(0.25 - 1) = 0.26; v1 = 0.26 - 0.01 * 0 * sign(.) = 0.26
    x1 = 1 + 0.1 / (math.sqrt(0.26) + 0.5)
    x2 = x1 + 0.09 / (math.sqrt(0.26) + 0.5)
    assert _fedopt_two_steps("yogi") == pytest.approx([x1, x2], rel=1e-6)


def test_fedadagrad_two_steps() -> None:
    # v0 = 0.25 + 1 = 1.25; v1 = 1.25 + 0 = 1.25
    x1 = 1 + 0.1 / (math.sqrt(1.25) + 0.5)
    x2 = x1 + 0.09 / (math.sqrt(1.25) + 0.5)
    assert _fedopt_two_steps("adagrad") == pytest.approx([x1, x2], rel=1e-6)



@pytest.mark.parametrize(
    ("correction", "etas"),
    [
        ("none", (1.0, 1.0)),
        # t = 1, 2: sqrt(1 - 0.99) / (1 - 0.9) = 0.1 / 0.1 = 1; sqrt(1 - 0.9801) / (1 - 0.81) = 0.1410674 / 0.19
        ("adam", (1.0, 0.7424602)),
        # t = 2, 3 (Flower's server_round + 1): 0.7424602; sqrt(1 - 0.970299) / (1 - 0.729) = 0.1723398 / 0.271
        ("flower", (0.7424602, 0.6359402)),
    ],
)
def test_fedadam_bias_correction_scales_eta_as_adam_or_flower(correction: str, etas: tuple[float, float]) -> None:
    agg = FedOpt("adam", FedAdamOptions(server_lr=1.0, beta1=0.9, beta2=0.99, tau=0.5, bias_correction=correction))  # type: ignore[arg-type]
    assert [agg.step_size(0), agg.step_size(1)] == pytest.approx(list(etas), rel=1e-6)
    x1 = agg.aggregate({"w": t(1.0)}, [result(0, w=t(1.5)), result(1, w=t(2.5))], 0)["w"].item()
    x2 = agg.aggregate({"w": t(x1)}, [result(0, w=t(x1)), result(1, w=t(x1))], 1)["w"].item()
    # the moments of test_fedadam_two_steps: m0 = 0.1, v0 = 0.2575; m1 = 0.09, v1 = 0.254925
    expected1 = 1 + etas[0] * 0.1 / (math.sqrt(0.2575) + 0.5)
    assert [x1, x2] == pytest.approx([expected1, expected1 + etas[1] * 0.09 / (math.sqrt(0.254925) + 0.5)], rel=1e-6)


def test_only_fedadam_has_a_bias_correction() -> None:
    with pytest.raises(ValueError, match="bias_correction is FedAdam's"):
        FedOpt("yogi", FedAdamOptions(bias_correction="adam"))
    with pytest.raises(ConfigError, match=r"^algorithm\.bias_correction: must be none, adam or flower"):
        FedAdamOptions(bias_correction="kingma").validate("algorithm")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"algorithm\.bias_correction"):
        make_aggregator("fedyogi", {"bias_correction": "adam"}, num_clients=2, model=nn.Linear(1, 1), seed=0)


def test_fedopt_uniform_weighting_is_algorithm_2s_plain_mean() -> None:
    # n = (1, 3), y = (1.5, 3.5) from x = 1. samples: Delta = 0.25 * 0.5 + 0.75 * 2.5 = 2.0; uniform: (0.5 + 2.5) / 2 = 1.5
    # FedAdagrad, tau = 0.5: m0 = 0.1 Delta; v0 = 0.25 + Delta^2; x1 = 1 + m0 / (sqrt(v0) + 0.5)
    res = [result(0, 1, w=t(1.5)), result(1, 3, w=t(3.5))]
    for weighting, delta in (("samples", 2.0), ("uniform", 1.5)):
        agg = FedOpt("adagrad", FedOptOptions(server_lr=1.0, tau=0.5, weighting=weighting))  # type: ignore[arg-type]
        expected = 1 + 0.1 * delta / (math.sqrt(0.25 + delta**2) + 0.5)
        assert agg.aggregate({"w": t(1.0)}, res, 0)["w"].item() == pytest.approx(expected, rel=1e-6)


# ---------------------------------------------------------------- FedBN


class TinyBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.bn = nn.BatchNorm1d(2)


def test_batchnorm_keys_lists_bn_parameters_and_buffers() -> None:
    assert sorted(batchnorm_keys(TinyBN())) == ["bn.bias", "bn.num_batches_tracked", "bn.running_mean", "bn.running_var", "bn.weight"]


def test_fedbn_keeps_bn_per_client() -> None:
    agg = FedBN(["bn.weight"])
    clients = Clients(agg)  # each client's BN entries are its own state
    g = {"fc.weight": t(0.0), "bn.weight": t(1.0)}
    res = [result(0, 1, **{"fc.weight": t(2.0), "bn.weight": t(10.0)}), result(1, 3, **{"fc.weight": t(6.0), "bn.weight": t(20.0)})]
    out = agg.aggregate(g, clients.results(0, g, res), 0)
    # non-BN: 0.25 * 2 + 0.75 * 6 = 5.0; global BN (average): 0.25 * 10 + 0.75 * 20 = 17.5
    assert out["fc.weight"].item() == 5.0
    assert out["bn.weight"].item() == 17.5
    assert clients.start(0, 1, out)[0] == {"fc.weight": t(5.0), "bn.weight": t(10.0)}
    assert clients.start(1, 1, out)[0] == {"fc.weight": t(5.0), "bn.weight": t(20.0)}
    assert clients.start(2, 1, out)[0] == out  # never trained: starts from the global model
    assert agg.state_dict() == {}

    keep = FedBN(["bn.weight"], FedBNOptions(global_bn="keep"))
    assert keep.aggregate(g, res, 0)["bn.weight"].item() == 1.0


# ---------------------------------------------------------------- VRL-SGD


def test_vrl_sgd_deltas_over_two_rounds() -> None:
    agg = VRLSGD()
    x = {"w": t(1.0)}
    # Round 0: x_hat = mean(0.5, 1.5) = 1.0
    #   Delta_0 = 0 + (1.0 - 0.5) / (2 * 0.125) = 2.0;  Delta_1 = (1.0 - 1.5) / (4 * 0.125) = -1.0
    x = agg.aggregate(x, [result(0, steps=2, lr=0.125, w=t(0.5)), result(1, steps=4, lr=0.125, w=t(1.5))], 0)
    assert x["w"].item() == 1.0
    # correction (the term's gradient) = -Delta_i
    assert agg.downlink(0, 1, x).context["correction"]["w"].item() == pytest.approx(-2.0)
    assert agg.downlink(1, 1, x).context["correction"]["w"].item() == pytest.approx(1.0)
    assert agg.downlink(5, 1, x).context["correction"]["w"].item() == 0.0
    # Round 1: x_hat = mean(0.75, 1.25) = 1.0; Delta_0 = 2 + 0.25 / 0.25 = 3; Delta_1 = -1 - 0.25 / 0.25 = -2
    agg.aggregate(x, [result(0, steps=2, lr=0.125, w=t(0.75)), result(1, steps=2, lr=0.125, w=t(1.25))], 1)
    assert agg.deltas[0]["w"].item() == pytest.approx(3.0)
    assert agg.deltas[1]["w"].item() == pytest.approx(-2.0)


# ---------------------------------------------------------------- FedMut


def _fedmut_after_one_round(seed: int, ids: list[int]) -> tuple[FedMut, dict[str, torch.Tensor]]:
    agg = FedMut(seed, FedMutOptions(alpha=0.5), param_keys=["a", "b"])
    g0 = {"a": t(0.0, 0.0), "b": t(1.0)}
    # FedAvg of the two clients: a = (2, -4), b = 3 -> update g1 - g0 = ((2, -4), 2)
    g1 = agg.aggregate(g0, [result(0, a=t(2.0, -4.0), b=t(3.0)), result(1, a=t(2.0, -4.0), b=t(3.0))], 0)
    agg.begin_round(1, ids)
    return agg, g1


def test_fedmut_first_round_sends_plain_global() -> None:
    assert FedMut(0).downlink(0, 0, {"a": t(1.0)}).params is None


def test_fedmut_mutations_are_balanced_and_reproducible() -> None:
    ids = [7, 2, 9, 4]
    agg, g1 = _fedmut_after_one_round(seed=3, ids=ids)
    models = {cid: agg.downlink(cid, 1, g1).params for cid in ids}
    for cid, m in models.items():
        # each layer is g1 + 0.5 * (+-1) * (g1 - g0): a in {(3, -6), (1, -2)}, b in {4, 2}
        assert m["a"].tolist() in ([3.0, -6.0], [1.0, -2.0])
        assert m["b"].item() in (4.0, 2.0)
    for key in ("a", "b"):
        mean = torch.stack([m[key] for m in models.values()]).mean(0)
        assert torch.equal(mean, g1[key])  # two +1 and two -1 per layer cancel exactly
    again, g1b = _fedmut_after_one_round(seed=3, ids=list(reversed(ids)))
    for cid in ids:
        assert all(torch.equal(again.downlink(cid, 1, g1b).params[k], models[cid][k]) for k in ("a", "b"))



def test_fedmut_acceleration_of_the_authors_code_by_hand() -> None:
    # acc_rate 0.3, bound 50; round 1 mutates with g from round 0: r = 0.3 * (1 - 0/50) = 0.3, so -1 -> -0.7.
    # g1 = (a = (2, -4), b = 3), g = ((2, -4), 2), alpha 0.5: a in {(3, -6), (2 - 0.7, -4 + 1.4)}, b in {4, 3 - 0.7}
    agg = FedMut(3, FedMutOptions(alpha=0.5, acc_rate=0.3, acc_bound=50), param_keys=["a", "b"])
    g1 = agg.aggregate({"a": t(0.0, 0.0), "b": t(1.0)}, [result(0, a=t(2.0, -4.0), b=t(3.0)), result(1, a=t(2.0, -4.0), b=t(3.0))], 0)
    agg.begin_round(1, [0, 1])
    models = [agg.downlink(cid, 1, g1).params for cid in (0, 1)]
    assert sorted(m["b"].item() for m in models) == pytest.approx([2.3, 4.0])
    assert sorted(tuple(m["a"].tolist()) for m in models) == [pytest.approx((1.3, -2.6)), pytest.approx((3.0, -6.0))]
    # r falls linearly: at round 26 (g from round 25) r = 0.3 * 0.5 = 0.15; from round 51 on, r = 0 (balanced)
    # (b: 3 + 0.5 * (-1 + r) * 2 = 2 + r)
    agg.begin_round(26, [0, 1])
    assert sorted(agg.downlink(c, 26, g1).params["b"].item() for c in (0, 1)) == pytest.approx([2.15, 4.0])
    agg.begin_round(51, [0, 1])
    assert sorted(agg.downlink(c, 51, g1).params["b"].item() for c in (0, 1)) == pytest.approx([2.0, 4.0])


def test_fedmut_odd_number_of_clients_still_averages_to_global() -> None:
    ids = [0, 1, 2]
    agg, g1 = _fedmut_after_one_round(seed=11, ids=ids)
    stacked = torch.stack([agg.downlink(cid, 1, g1).params["a"] for cid in ids])
    assert torch.equal(stacked.mean(0), g1["a"])  # +1, -1 and 0


def test_balanced_signs_sum_to_zero() -> None:
    gen = torch.Generator().manual_seed(0)
    for m in (1, 2, 5, 8):
        s = balanced_signs(m, gen)
        assert s.sum().item() == 0 and s.abs().sum().item() == 2 * (m // 2)


# ---------------------------------------------------------------- registry


def test_registry_builds_every_algorithm() -> None:
    model = TinyBN()
    names = algorithm_names()
    assert {"fedavg", "fedprox", "scaffold", "fednova", "fedadam", "fedyogi", "fedadagrad", "fedbn", "vrl_sgd", "fedmut", "pa3fed"} <= set(names)
    for name in names:
        if name == "fedalign":  # needs a ResNet with a slimmable final stage; refuses others (tests/test_fedalign.py)
            from chillfl.models import build_model

            agg, terms = make_aggregator(name, None, num_clients=3, model=build_model("resnet20", (3, 8, 8), 2), seed=0)
            continue
        needs = {"max_norm": 1.0} if name == "norm_bound" else None  # M has no default (tests/test_norm_bound.py)
        agg, terms = make_aggregator(name, needs, num_clients=3, model=model, seed=0)
        assert callable(agg.aggregate) and isinstance(terms, list)
    agg, terms = make_aggregator("fedprox", {"mu": 0.2}, num_clients=3, model=model, seed=0)
    assert isinstance(agg, FedProx) and agg.mu == 0.2 and isinstance(terms[0], ProximalTerm)


def test_registry_pa3fed_wraps_base_and_keeps_its_terms() -> None:
    agg, terms = make_aggregator(
        "pa3fed", {"base": "scaffold", "base_options": {"global_lr": 0.5}, "beta": 0.1}, num_clients=3, model=TinyBN(), seed=0
    )
    assert isinstance(agg, PA3Fed) and isinstance(agg.base, Scaffold) and agg.base.options.global_lr == 0.5
    assert agg.options.beta == 0.1 and isinstance(terms[0], LinearCorrectionTerm)


def test_registry_errors_name_field_and_allowed_values() -> None:
    model = TinyBN()
    with pytest.raises(ConfigError, match=r"algorithm\.name.*allowed: apfl, apple, bulyan, ccvr, centered_clip, cfl, ditto, dnc, fedadagrad, fedadam"):
        make_aggregator("fedsgd", None, num_clients=3, model=model, seed=0)
    with pytest.raises(ConfigError, match=r"algorithm\.mu.*must be in \[0, 1e6\]"):
        make_aggregator("fedprox", {"mu": -1.0}, num_clients=3, model=model, seed=0)
    with pytest.raises(ConfigError, match=r"algorithm\.lr.*allowed: mu"):
        make_aggregator("fedprox", {"lr": 1.0}, num_clients=3, model=model, seed=0)
    with pytest.raises(ConfigError, match=r"algorithm\.base.*allowed: fedadagrad"):
        make_aggregator("pa3fed", {"base": "pa3fed"}, num_clients=3, model=model, seed=0)
    with pytest.raises(ConfigError, match=r"algorithm\.base_options\.mu"):
        make_aggregator("pa3fed", {"base": "fedprox", "base_options": {"mu": -2}}, num_clients=3, model=model, seed=0)


def test_correction_term_through_the_shared_sgd_step() -> None:
    """One plain SGD step with SCAFFOLD's term moves y by -lr * (c - c_i) relative to the step without it."""
    from chillfl.training.local import LocalSpec, model_state, train_client

    model = nn.Linear(2, 1)
    start = model_state(model)
    x, y = torch.tensor([[1.0, 2.0]]), torch.tensor([0])
    ctx = {"correction": {"weight": torch.full((1, 2), 2.0), "bias": torch.full((1,), -4.0)}}
    kwargs = dict(lr=0.5, temperature=1.0, context=ctx)
    base_loss = lambda logits, targets, temp: logits.sum()  # noqa: E731  (any base loss: its gradient cancels out)
    with_term = train_client(model, start, x, y, spec=LocalSpec(1, 1, base_loss=base_loss, terms=(LinearCorrectionTerm(),)), generator=torch.Generator(), **kwargs)
    without = train_client(model, start, x, y, spec=LocalSpec(1, 1, base_loss=base_loss), generator=torch.Generator(), **kwargs)
    # difference = -lr * correction = (-1, -1) for the weight, +2 for the bias
    torch.testing.assert_close(with_term.params["weight"] - without.params["weight"], torch.tensor([[-1.0, -1.0]]))
    torch.testing.assert_close(with_term.params["bias"] - without.params["bias"], torch.tensor([2.0]))


@pytest.mark.parametrize("threads", [1, 3])
def test_weighted_average_in_blocks_and_threads_is_bitwise_the_client_by_client_sum(threads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.aggregation import base

    monkeypatch.setattr(base, "average_threads", lambda: threads)
    torch.manual_seed(0)
    n = 5 * base.AVERAGE_BLOCK + 123  # several blocks and a short last one
    stacked = torch.randn(7, 3, n // 3 + 1).transpose(1, 2)  # clients as views of one stack, in a transposed layout
    states = [{"w": stacked[i], "b": torch.randn(4)} for i in range(7)]
    weights = torch.rand(7, dtype=torch.float64)
    weights = weights / weights.sum()
    out = base.weighted_average(states, weights)
    for key in ("w", "b"):  # reference: one pass per client, in client order, in float64
        acc = torch.zeros_like(states[0][key], dtype=torch.float64)
        for w, s in zip(weights.tolist(), states):
            acc.add_(s[key], alpha=w)
        assert torch.equal(out[key], acc.to(torch.float32))


def test_weighted_average_off_the_cpu_adds_whole_tensors_one_launch_per_client_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks are a CPU cache trick: on an accelerator each block would be a kernel launch (issue 39).

    ``meta`` tensors stand in for a device that is not the CPU (no data, the same dispatch): the add
    count is one per client and key there, and per block and client on the CPU.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    from chillfl.aggregation import base

    monkeypatch.setattr(base, "average_threads", lambda: 1)  # a dispatch mode sees its own thread only

    class Adds(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.count = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.count += func.__name__.startswith("add_")
            return func(*args, **(kwargs or {}))

    def adds(device: str) -> int:
        states = [{"w": torch.zeros(3 * base.AVERAGE_BLOCK, device=device), "b": torch.zeros(5, device=device)} for _ in range(4)]
        counter = Adds()
        with counter:
            base._accumulate(torch.zeros(3 * base.AVERAGE_BLOCK, dtype=torch.float64, device=device), [s["w"] for s in states], [0.25] * 4)
        return counter.count

    assert adds("meta") == 4  # one per client
    assert adds("cpu") == 12  # 3 blocks x 4 clients

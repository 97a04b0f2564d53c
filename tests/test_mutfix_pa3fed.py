"""PA3Fed's weights where the alphas are subnormal (mut101 D1, N01).

Clients send ``log_alpha`` when alpha is 0, subnormal or inf, but the server took the plain m_i alpha_i / sum only
when that sum was 0 or not finite: subnormal alphas (beta * score change in ~[708, 745]) kept a few bits or rounded
to 0, the sum stayed positive, and one client could get the whole weight. The plain formula is now taken only where
every non-zero product is a normal float; the client sends the exponent for exactly the alphas that route reads it of.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, FedAvg, Trained
from chillfl.aggregation.pa3fed import PA3Fed, PA3FedClient, PA3FedOptions, alpha_weights, stability_coefficient

F64 = torch.float64


def result(cid: int, n: int, w: float, report: dict[str, Any]) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor([w], dtype=F64)}, n, 1, 0.1, 1.0, 0.0, report)


def test_subnormal_alphas_get_eq_10s_weights_not_all_to_one_client() -> None:
    # beta 1000, score changes 0.744 and 0.745: alphas exp(-744) = 1e-323 and exp(-745) = 5e-324, both subnormal;
    # m_i alpha_i = 0.5 * those kept one bit or rounded to 0: the plain formula gave [1.0, 0.0]
    a0, a1 = stability_coefficient(1.0, 1.744, 1000.0), stability_coefficient(1.0, 1.745, 1000.0)
    assert 0 < a1 <= a0 < sys.float_info.min
    agg = PA3Fed(FedAvg(), PA3FedOptions(beta=1000.0, mode="always"))
    out = agg.aggregate({"w": torch.zeros(1, dtype=F64)}, [
        result(0, 1, 0.0, {"alpha": a0, "log_alpha": -744.0}),
        result(1, 1, 1.0, {"alpha": a1, "log_alpha": -745.0}),
    ], 0)
    exact = 1 / (1 + math.e)  # e^-745 / (e^-744 + e^-745)
    assert out["w"].item() == pytest.approx(exact, rel=1e-12)


def test_many_clients_with_subnormal_products() -> None:
    m = torch.full((100,), 0.01, dtype=F64)
    ex = torch.full((100,), -742.0, dtype=F64)
    ex[0] = -740.0
    w = alpha_weights(m, ex.exp(), ex)
    exact = torch.softmax(m.log() + ex, 0)  # w0 = e^2 / (e^2 + 99) = 0.0695; was 1.0, the others 0.0
    assert torch.allclose(w, exact, rtol=1e-12, atol=0)
    assert float(w.sum()) == pytest.approx(1.0, rel=1e-12)


def test_one_subnormal_product_beside_normal_ones_is_exact() -> None:
    m = torch.tensor([0.5, 0.5], dtype=F64)
    ex = torch.tensor([-700.0, -735.0], dtype=F64)  # e^-700 normal, e^-735 subnormal (its product kept ~28 bits)
    w = alpha_weights(m, ex.exp(), ex)
    assert w[1].item() == pytest.approx(math.exp(-35) / (1 + math.exp(-35)), rel=1e-14, abs=0)  # was 1e-4 off


def test_normal_products_keep_the_plain_formula_bitwise() -> None:
    m = torch.tensor([0.2, 0.3, 0.5], dtype=F64)
    alphas = torch.tensor([math.exp(-0.3), math.exp(-700.0), 0.0], dtype=F64)  # a zero product is not a subnormal one
    w = alpha_weights(m, alphas, torch.tensor([-0.3, -700.0, -800.0], dtype=F64))
    plain = m * alphas
    assert torch.equal(w, plain / plain.sum())


def tiny_trained() -> tuple[nn.Module, Trained]:
    torch.manual_seed(0)
    model = nn.Linear(3, 2).to(F64)
    x, y = torch.randn(8, 3, dtype=F64), torch.randint(0, 2, (8,))
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return model, Trained(0, x, y, params, {}, {}, 0.1, 1.0, params, 1)


def client_report(beta: float, change: float) -> dict[str, Any]:
    """A client's report where its previous score was ``change`` above this round's (alpha = exp(-beta * change))."""
    client = PA3FedClient(PA3FedOptions(beta=beta, mode="always"))
    model, trained = tiny_trained()
    _, first = client.finish(model, {}, trained)
    score = first["score"]
    assert isinstance(score, float)
    _, report = client.finish(model, {"pa3fed.score": torch.tensor(score + change, dtype=F64)}, trained)
    return dict(report)


def test_client_sends_the_exponent_of_a_subnormal_alpha_and_the_server_reads_it() -> None:
    reports = [client_report(1000.0, 0.744), client_report(1000.0, 0.745)]
    assert all(0 < r["alpha"] < sys.float_info.min for r in reports)
    assert [r["log_alpha"] for r in reports] == [pytest.approx(-744.0), pytest.approx(-745.0)]  # log(1e-323) is -743.7
    agg = PA3Fed(FedAvg(), PA3FedOptions(beta=1000.0, mode="always"))
    out = agg.aggregate({"w": torch.zeros(1, dtype=F64)}, [result(0, 1, 0.0, reports[0]), result(1, 1, 1.0, reports[1])], 0)
    assert out["w"].item() == pytest.approx(1 / (1 + math.e), rel=1e-9)


def test_client_sends_no_exponent_for_a_normal_alpha() -> None:
    report = client_report(1000.0, 0.7)  # exp(-700): small but normal, log(alpha) is exact enough
    assert sys.float_info.min <= report["alpha"] and "log_alpha" not in report

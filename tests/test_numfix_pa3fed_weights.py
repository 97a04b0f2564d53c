"""PA3Fed's alpha-weighted aggregation is defined whatever the alphas' magnitudes (numext finding 1).

A large beta (or score change) underflowed every alpha = exp(-beta |d|) to 0 (signed: overflowed one to inf), and
``w / w.sum()`` was 0/0: a NaN global model reported as "diverged" though nothing diverged.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg, Trained
from chillfl.aggregation.pa3fed import PA3Fed, PA3FedOptions, stability_coefficient
from chillfl.errors import ConfigError
from test_pa3fed_e2e import data, tiny_config  # noqa: F401  (data: the module fixture)


def result(cid: int, n: int, w: float, report: dict[str, Any]) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor([w], dtype=torch.float64)}, n, 1, 0.1, 1.0, 0.0, report)


def test_every_alpha_zero_gives_the_exponents_weights() -> None:
    agg = PA3Fed(FedAvg(), PA3FedOptions(beta=1e4, mode="always"))
    # alphas exp(-1e4 * 0.1) = exp(-1000) and exp(-1e4 * 0.1002) underflow to 0; their exponents are what the clients send
    out = agg.aggregate({"w": torch.zeros(1, dtype=torch.float64)}, [
        result(0, 1, 0.0, {"alpha": 0.0, "log_alpha": -1000.0}),
        result(1, 3, 1.0, {"alpha": 0.0, "log_alpha": -1002.0}),
    ], 0)
    # w_1 = 3 e^-1002 / (e^-1000 + 3 e^-1002) = 3 e^-2 / (1 + 3 e^-2)
    a = 3 * math.exp(-2)
    assert out["w"].item() == pytest.approx(a / (1 + a), rel=1e-12)
    m = agg.round_metrics()
    assert m["alphas"] == {0: 0.0, 1: 0.0}  # Eq. 10's raw alphas stay the reported metric
    assert m["weight_shift"] == pytest.approx(abs(1 / (1 + a) - 0.25), rel=1e-12)


def test_signed_overflow_is_inf_and_its_client_takes_the_weight() -> None:
    assert stability_coefficient(0.0, 1000.0, 1.0, signed=True) == math.inf  # was an OverflowError from math.exp
    agg = PA3Fed(FedAvg(), PA3FedOptions(beta=1.0, mode="always", signed=True))
    out = agg.aggregate({"w": torch.zeros(1, dtype=torch.float64)}, [
        result(0, 1, 0.0, {"alpha": 1.0}),
        result(1, 1, 1.0, {"alpha": math.inf, "log_alpha": 1000.0}),
    ], 0)
    assert out["w"].item() == 1.0


def test_ordinary_alphas_keep_the_plain_formula_bitwise() -> None:
    agg = PA3Fed(FedAvg(), PA3FedOptions(mode="always"))
    alphas = [math.exp(-0.3), math.exp(-0.07)]
    out = agg.aggregate({"w": torch.zeros(1, dtype=torch.float64)}, [result(0, 2, 0.0, {"alpha": alphas[0]}), result(1, 5, 1.0, {"alpha": alphas[1]})], 0)
    w = torch.tensor([2.0, 5.0], dtype=torch.float64) / 7 * torch.tensor(alphas, dtype=torch.float64)
    assert out["w"].item() == float((w / w.sum())[1])


def test_exponents_all_minus_inf_name_beta() -> None:
    agg = PA3Fed(FedAvg(), PA3FedOptions(beta=1e308, mode="always"))
    with pytest.raises(ConfigError, match="algorithm.beta"):
        agg.aggregate({"w": torch.zeros(1)}, [result(0, 1, 0.0, {"alpha": 0.0, "log_alpha": -math.inf}), result(1, 1, 1.0, {"alpha": 0.0, "log_alpha": -math.inf})], 0)


def test_client_sends_the_exponent_only_when_alpha_lost_it(data: Any) -> None:  # noqa: F811
    from chillfl.experiment import build_experiment

    exp = build_experiment(tiny_config({"name": "pa3fed", "beta": 1e4}), data=data)
    half = exp.aggregator.client_half()
    x, y = data.client_train(1)
    trained = Trained(1, x, y, exp.initial_state, {}, {}, 0.05, 1.0, exp.initial_state, 1)
    state, first = half.finish(exp.model, {}, trained)
    assert "log_alpha" not in first and first["alpha"] == 1.0
    score = first["score"]
    assert isinstance(score, float)
    _, report = half.finish(exp.model, {"pa3fed.score": torch.tensor(score + 0.5, dtype=torch.float64)}, trained)
    assert report["alpha"] == 0.0 and report["log_alpha"] == pytest.approx(-1e4 * 0.5)

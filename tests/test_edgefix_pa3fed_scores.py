"""PA3Fed: a non-finite client score is said as such, in one line, not as ``algorithm.beta``'s range or a silent 0 weight.

Why: a NaN score (its model's loss on its own data) made alpha_weights refuse ``algorithm.beta`` ("lower
algorithm.beta"), and an inf score after a finite one gave that client weight 0 with nothing said.
"""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.aggregation.pa3fed import PA3Fed, alpha_weights, stability_coefficient, stability_exponent
from chillfl.errors import ConfigError, Diverged


def _result(cid: int, score: float, alpha: float = 1.0, log_alpha: float | None = None) -> ClientResult:
    report = {"score": score, "grad_norm": 1.0, "alpha": alpha, **({"log_alpha": log_alpha} if log_alpha is not None else {})}
    return ClientResult(cid, {"w": torch.ones(2)}, 10, 1, 0.1, 1.0, 0.5, report)


def test_alpha_weights_names_a_nan_score_not_beta() -> None:
    a, e = stability_coefficient(1.0, math.nan, 1.0), stability_exponent(1.0, math.nan, 1.0)
    with pytest.raises(ValueError, match=r"client 1 \(in the round's order\) has a nan alpha or Eq\. 10 exponent, from a score") as caught:
        alpha_weights(torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([1.0, a], dtype=torch.float64),
                      torch.tensor([0.0, e], dtype=torch.float64))
    assert not isinstance(caught.value, ConfigError)  # was ConfigError("algorithm.beta", "... lower algorithm.beta")


def test_alpha_weights_still_refuses_beta_past_range() -> None:
    with pytest.raises(ConfigError, match="algorithm.beta"):
        alpha_weights(torch.tensor([0.5, 0.5], dtype=torch.float64), torch.tensor([math.inf, 1.0], dtype=torch.float64),
                      torch.tensor([math.inf, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("score", [math.inf, math.nan])
def test_a_non_finite_score_stops_the_round_naming_the_client(score: float) -> None:
    # an inf score after a finite one: alpha = exp(-beta * inf) = 0, so the client had weight 0 silently
    alpha = stability_coefficient(1.0, score, 1.0)
    results = [_result(0, 0.5), _result(3, score, alpha, stability_exponent(1.0, score, 1.0))]
    with pytest.raises(Diverged) as caught:
        PA3Fed(FedAvg()).aggregate({"w": torch.zeros(2)}, results, 4)
    said = str(caught.value)
    assert said.startswith(f"round 5, client 3: its PA3Fed score (Eq. 8: its trained model's loss on its own data) is {score} ("), said


def test_finite_scores_aggregate() -> None:
    out = PA3Fed(FedAvg()).aggregate({"w": torch.zeros(2)}, [_result(0, 0.5), _result(1, 0.7)], 0)
    assert torch.equal(out["w"], torch.ones(2))

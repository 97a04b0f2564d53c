"""PA3Fed refuses an alpha whose exponent is lost when the uplink carries no ``log_alpha`` (pa3left finding 1).

PA3FedClient sends Eq. 10's exponent as ``log_alpha`` whenever its alpha is 0, subnormal or inf. A client half
written by hand (a plugin's, a Flower node's) that sent such an alpha without it had its exponent read as
log(0) = -inf: weight 0 on the log-space route, silently (its true exponent may have been the round's largest), and a
round of such clients blamed ``algorithm.beta``. The exponent cannot be derived on the server (the previous score is in
the client's state), so the report is refused in one line naming the field.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.aggregation.pa3fed import PA3Fed, PA3FedOptions

F64 = torch.float64


def result(cid: int, w: float, report: dict[str, Any]) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor([w], dtype=F64)}, 1, 1, 0.1, 1.0, 0.0, report)


def aggregate(*reports: dict[str, Any]) -> torch.Tensor:
    agg = PA3Fed(FedAvg(), PA3FedOptions(beta=1000.0, mode="always"))
    return agg.aggregate({"w": torch.zeros(1, dtype=F64)}, [result(i, float(i), r) for i, r in enumerate(reports)], 0)["w"]


@pytest.mark.parametrize("alpha", [0.0, 1e-310, math.inf], ids=["zero", "subnormal", "inf"])
def test_an_alpha_without_its_exponent_is_refused_naming_log_alpha(alpha: float) -> None:
    # client 1 is subnormal and sent its exponent: client 0's 0 was read as -inf and client 1 took the whole weight
    with pytest.raises(ValueError) as err:
        aggregate({"alpha": alpha}, {"alpha": 1e-310, "log_alpha": -713.0})
    said = str(err.value)
    assert "report['log_alpha']" in said and "client 0" in said and "\n" not in said


def test_every_alpha_zero_without_exponents_names_log_alpha_not_beta() -> None:
    with pytest.raises(ValueError) as err:
        aggregate({"alpha": 0.0}, {"alpha": 0.0})
    assert "log_alpha" in str(err.value) and "algorithm.beta" not in str(err.value)


def test_a_nan_alpha_is_named_as_alpha() -> None:
    with pytest.raises(ValueError, match=r"report\['alpha'\] to be Eq. 10's exp.*got nan"):
        aggregate({"alpha": math.nan}, {"alpha": 1.0})


def test_the_same_alphas_with_their_exponents_still_aggregate() -> None:
    out = aggregate({"alpha": 0.0, "log_alpha": -712.0}, {"alpha": 1e-310, "log_alpha": -713.0})
    assert out.item() == pytest.approx(1 / (1 + math.e), rel=1e-12)  # e^-713 / (e^-712 + e^-713)


def test_normal_alphas_need_no_exponent() -> None:
    small = math.exp(-700.0)
    assert small >= sys.float_info.min
    out = aggregate({"alpha": small}, {"alpha": math.exp(-701.0)})
    assert out.item() == pytest.approx(1 / (1 + math.e), rel=1e-9)

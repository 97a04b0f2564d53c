"""``report_number``: the one rule for a number a client half reports (a Python number or a 1-element tensor, 0-d
included), shared by q-FFL, IFCA and PA3Fed. PA3Fed's own reader refused every tensor, a 0-d one included, where
q-FFL and IFCA took it for the same kind of value."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg, report_number
from chillfl.aggregation.pa3fed import LOG_ALPHA, PA3Fed, PA3FedOptions
from chillfl.engine.record import Json


def _result(cid: int, n: int, w: float, report: dict[str, float]) -> ClientResult:
    return ClientResult(cid, {"w": torch.tensor([w])}, n, 1, 0.1, 1.0, 0.0, dict(report))


def _as_tensors(r: ClientResult, shape: tuple[int, ...]) -> ClientResult:
    """``r`` with every reported number sent as a float64 tensor of ``shape`` (one element)."""
    return dataclasses.replace(r, report={k: torch.full(shape, float(v), dtype=torch.float64) for k, v in r.report.items() if isinstance(v, float)})


def _rounds(as_tensors: tuple[int, ...] | None) -> tuple[list[torch.Tensor], list[dict[str, Json]]]:
    """Two PA3Fed rounds (mode 'always': the alphas weigh) on hand-made reports; each round's model and metrics."""
    agg = PA3Fed(FedAvg(), PA3FedOptions(mode="always"))
    rounds = [
        [_result(0, 1, 0.0, {"score": 1.0, "grad_norm": 1.0, "alpha": 1.0}), _result(1, 3, 1.0, {"score": 2.0, "grad_norm": 1.0, "alpha": 0.5})],
        [_result(0, 1, 0.0, {"score": 1.5, "grad_norm": 2.0, "alpha": 0.25}),
         _result(1, 3, 1.0, {"score": 0.5, "grad_norm": 2.0, "alpha": 0.0, LOG_ALPHA: -800.0})],  # alpha 0: its exponent sent
    ]
    models, metrics = [], []
    for rnd, results in enumerate(rounds):
        sent = [_as_tensors(r, as_tensors) for r in results] if as_tensors is not None else results
        models.append(agg.aggregate({"w": torch.zeros(1)}, sent, rnd)["w"])
        metrics.append(dict(agg.round_metrics()))
    return models, metrics


@pytest.mark.parametrize("shape", [(), (1,)], ids=["0-d", "1-element"])
def test_pa3fed_reads_a_reported_tensor_as_its_number(shape: tuple[int, ...]) -> None:
    """Fails on the old code for both shapes: PA3Fed's ``_number`` raised 'needs report['grad_norm'] to be a number'."""
    plain_models, plain_metrics = _rounds(None)
    models, metrics = _rounds(shape)
    assert all(torch.equal(a, b) for a, b in zip(plain_models, models))
    assert metrics == plain_metrics
    assert metrics[1]["adapted"] is True and metrics[1]["alphas"] == {0: 0.25, 1: 0.0}


@pytest.mark.parametrize("value", [2, 2.0, torch.tensor(2.0), torch.tensor([2.0]), torch.tensor([[2]])], ids=["int", "float", "0-d", "1-d", "2-d"])
def test_a_number_or_a_one_element_tensor_is_read(value: object) -> None:
    r = _result(3, 1, 0.0, {})
    r.report["loss"] = value  # type: ignore[assignment]
    out = report_number(r, "loss", "q-FFL")
    assert out == 2.0 and type(out) is float


@pytest.mark.parametrize("value", [None, "2", torch.tensor([1.0, 2.0]), torch.zeros(0)], ids=["missing", "str", "2-element", "empty"])
@pytest.mark.parametrize("method", ["q-FFL", "IFCA", "PA3Fed"])
def test_anything_else_is_refused_naming_the_method_key_and_client(value: object, method: str) -> None:
    r = _result(3, 1, 0.0, {})
    if value is not None:
        r.report["loss"] = value  # type: ignore[assignment]
    with pytest.raises(ValueError, match=rf"^{re.escape(method)} needs report\['loss'\] to be a number or a 1-element tensor \(client 3\), got "):
        report_number(r, "loss", method)


def test_a_nan_is_a_number_here() -> None:
    """The rule reads, it does not judge: a non-finite value is each method's own check (PA3Fed's Diverged)."""
    r = _result(0, 1, 0.0, {"score": math.nan})
    assert math.isnan(report_number(r, "score", "PA3Fed"))

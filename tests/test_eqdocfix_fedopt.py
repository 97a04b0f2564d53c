"""FedAdagrad reads ``beta1`` (Reddi et al.'s Algorithm 2 keeps the momentum m_t for all three FedOpt rules; ``beta1 = 0``
is Flower's FedAdagrad), without a warning, and its option docstring says so; q-FFL's ``q = 0`` is the plain mean."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from chillfl.aggregation.base import ClientResult
from chillfl.aggregation.fedopt import FedOpt, FedOptOptions
from chillfl.aggregation.qffl import QfflOptions, qffl_step
from chillfl.config import load_config
from chillfl.experiment import build_experiment
from chillfl.report.reference import render_reference

TINY = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 2, "federation.rounds": 1, "temperature.policy": "none"}


def _result(cid: int, w: float) -> ClientResult:
    return ClientResult(client_id=cid, params={"w": torch.tensor([w])}, num_samples=1, num_steps=1, lr=0.1, temperature=1.0, train_loss=0.0)


def _two_rounds(beta1: float) -> list[float]:
    agg = FedOpt("adagrad", FedOptOptions(server_lr=1.0, beta1=beta1, tau=0.5))
    x1 = agg.aggregate({"w": torch.tensor([1.0])}, [_result(0, 1.5), _result(1, 2.5)], 0)["w"].item()
    x2 = agg.aggregate({"w": torch.tensor([x1])}, [_result(0, x1), _result(1, x1)], 1)["w"].item()
    return [x1, x2]


def test_fedadagrad_reads_beta1_and_beta1_zero_drops_the_momentum() -> None:
    # Delta_0 = 1, Delta_1 = 0; v_0 = v_1 = 0.25 + 1 = 1.25. beta1 = 0: m_0 = 1, m_1 = 0 (Flower's: the step stops with Delta)
    x1 = 1 + 1.0 / (math.sqrt(1.25) + 0.5)
    assert _two_rounds(0.0) == pytest.approx([x1, x1], rel=1e-6)
    # beta1 = 0.9 (the default): m_0 = 0.1, m_1 = 0.09, the momentum keeps moving the model
    y1 = 1 + 0.1 / (math.sqrt(1.25) + 0.5)
    assert _two_rounds(0.9) == pytest.approx([y1, y1 + 0.09 / (math.sqrt(1.25) + 0.5)], rel=1e-6)


def test_fedadagrad_with_beta1_set_warns_of_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "chillfl"):
        exp = build_experiment(load_config(None, {**TINY, "algorithm.name": "fedadagrad", "algorithm.beta1": 0.0}))
    assert [r.getMessage() for r in caplog.records if "not read by" in r.getMessage()] == []
    assert isinstance(exp.aggregator, FedOpt) and exp.aggregator.options.beta1 == 0.0


def test_the_options_text_says_fedadagrad_reads_beta1_not_beta2() -> None:
    for text in ((FedOptOptions.__doc__ or ""), render_reference(only=["fedadagrad"])):
        flat = " ".join(text.split())
        assert "FedAdagrad reads none" not in flat
        assert "FedAdagrad included" in flat and "``beta1 = 0`` gives Flower's FedAdagrad" in flat
        assert "``beta2`` (FedAdam's and FedYogi's: FedAdagrad does not read it" in flat


def test_qffl_q0_is_the_plain_mean_and_its_options_text_says_so() -> None:
    # two clients, different losses, L = 1: q = 0 gives w - (Delta_1 + Delta_2) / 2, the unweighted mean of the models
    g = {"w": torch.tensor([0.0])}
    step, _ = qffl_step(g, [{"w": torch.tensor([1.0])}, {"w": torch.tensor([3.0])}], [0.5, 2.0], [1.0, 1.0], 0.0, ["w"])
    assert step["w"].item() == pytest.approx(2.0, rel=1e-12)
    flat = " ".join((QfflOptions.__doc__ or "").split())
    assert "0 = FedAvg" not in flat and 'FedAvg with ``weighting = "uniform"``' in flat

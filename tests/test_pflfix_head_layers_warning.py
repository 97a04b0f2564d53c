"""``head_layers`` / ``global_layers`` count every module with parameters as a layer (the rule every recorded result was
run with, kept): a head of 2 can then be a BatchNorm whose Linear stays in the body, or the hidden half of an LSTM layer.
The build says so in one warning line, naming the modules and the counts that keep each layer whole."""

from __future__ import annotations

import logging

import pytest
from torch import nn

from chillfl.aggregation.fedper import head_keys
from chillfl.aggregation.lg_fedavg import LGFedAvg, LGFedAvgOptions
from chillfl.aggregation.registry import make_aggregator
from chillfl.models.registry import build_model

pytestmark = pytest.mark.filterwarnings("ignore:.*declares no classifier head")


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "counts as a layer" in r.getMessage()]


def test_a_head_that_begins_with_a_batchnorm_warns_and_keeps_its_keys(caplog: pytest.LogCaptureFixture) -> None:
    model = build_model("fedchill_cnn1", (3, 32, 32), 10, {})
    with caplog.at_level(logging.WARNING):
        keys = head_keys(model, 2)
    bn = [f"classifier.5.{n}" for n in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")]
    assert keys == bn + ["classifier.8.weight", "classifier.8.bias"]  # the count is unchanged
    (said,) = _said(caplog)
    assert said.startswith("algorithm.head_layers = 2 ")
    assert "classifier.5.* (BatchNorm1d)" in said and "classifier.4.* (Linear) in the body" in said
    assert said.endswith("head_layers = 3 or 1 keeps every layer whole")


def test_a_head_that_splits_an_lstm_layer_warns_and_keeps_its_keys(caplog: pytest.LogCaptureFixture) -> None:
    model = build_model("char_lstm", (80,), 80, {})
    with caplog.at_level(logging.WARNING):
        keys = head_keys(model, 2)
    assert keys == ["lstm.1.hh.weight", "lstm.1.hh.bias", "head.weight", "head.bias"]
    (said,) = _said(caplog)
    assert "splits lstm.1 (LSTMLayer): lstm.1.hh.* in the head, lstm.1.ih.* in the body" in said
    assert said.endswith("head_layers = 3 or 1 keeps every layer whole")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert head_keys(model, 3) == ["lstm.1.ih.weight", "lstm.1.ih.bias", "lstm.1.hh.weight", "lstm.1.hh.bias", "head.weight", "head.bias"]
        head_keys(model, 1)
    assert _said(caplog) == []  # the suggested count keeps the layer whole; the classifier alone cuts nothing


def test_a_plain_mlp_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    with caplog.at_level(logging.WARNING):
        for layers in (1, 2):
            head_keys(model, layers)
    assert _said(caplog) == []
    assert head_keys(model, 2) == ["2.weight", "2.bias", "4.weight", "4.bias"]


def test_a_build_warns_once_under_the_methods_own_option(caplog: pytest.LogCaptureFixture) -> None:
    model = build_model("char_lstm", (80,), 80, {})
    with caplog.at_level(logging.WARNING):
        make_aggregator("fedrep", {"head_layers": 2}, num_clients=2, model=model, seed=0)
    assert len(_said(caplog)) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        LGFedAvg(model, LGFedAvgOptions(global_layers=2))
    (said,) = _said(caplog)
    assert said.startswith("algorithm.global_layers = 2 ") and said.endswith("global_layers = 3 or 1 keeps every layer whole")

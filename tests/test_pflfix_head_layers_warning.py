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


class _PreNormBlock(nn.Module):
    """A pre-norm transformer block (timm / torchvision layout): ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, 2, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))


class _PreNormViT(nn.Module):
    """Two pre-norm blocks, then the final ``norm`` of the residual stream and the ``head``: 14 parameterised modules."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.embed = nn.Linear(16, width)
        self.blocks = nn.Sequential(_PreNormBlock(width), _PreNormBlock(width))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 3)


def _hint(said: str) -> list[int]:
    """The counts a warning suggests (``head_layers = 8 or 2 keeps every layer whole``)."""
    return [int(k) for k in said.split("; head_layers = ")[1].split(" keeps")[0].split(" or ")]


def test_a_pre_norm_transformers_norm_and_head_is_whole_and_its_last_linear_is_not(caplog: pytest.LogCaptureFixture) -> None:
    """The final norm normalises the residual stream, not blocks.1.mlp.2's output: norm + head (2) cuts nothing. A head
    of 3 takes blocks.1.mlp.2 alone out of the residual block blocks.1 (its nearest parent, mlp, a plain nn.Sequential)."""
    model = _PreNormViT()
    with caplog.at_level(logging.WARNING):
        assert head_keys(model, 2) == ["norm.weight", "norm.bias", "head.weight", "head.bias"]
    assert _said(caplog) == []
    with caplog.at_level(logging.WARNING):
        assert head_keys(model, 3)[:2] == ["blocks.1.mlp.2.weight", "blocks.1.mlp.2.bias"]
    (said,) = _said(caplog)
    assert "splits blocks.1 (_PreNormBlock): blocks.1.mlp.2.* in the head, blocks.1.norm1.*, blocks.1.attn.*, blocks.1.attn.out_proj.* and 2 more in the body" in said
    assert said.endswith("head_layers = 8 or 2 keeps every layer whole")  # 8: block 1 whole (6 modules), the norm, the head


def test_a_pre_norm_transformer_warns_exactly_the_counts_that_cut_a_block(caplog: pytest.LogCaptureFixture) -> None:
    """By hand, of _PreNormViT's 15 parameterised modules (embed, 6 per block, norm, head): a head of 1 (head), 2 (norm,
    head), 8 (block 1 whole) or 14 (both blocks whole) cuts nothing; every other count cuts a block, and its advice is
    among those four."""
    model = _PreNormViT()
    whole = {1, 2, 8, 14}
    for layers in range(2, 15):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            head_keys(model, layers)
        said = _said(caplog)
        assert (said == []) == (layers in whole), (layers, said)
        assert all(set(_hint(line)) <= whole for line in said), (layers, said)


def test_a_suggested_count_never_cuts_a_layer_itself(caplog: pytest.LogCaptureFixture) -> None:
    """Every count a warning suggests, on each model, builds with no warning: the advice cuts nothing it warns of."""
    for model in (_PreNormViT(), build_model("char_lstm", (80,), 80, {}), build_model("fedchill_cnn1", (3, 32, 32), 10, {}), build_model("resnet20", (3, 32, 32), 10, {})):
        owners = sum(1 for m in model.modules() if any(True for _ in m.parameters(recurse=False)))
        for layers in range(2, owners):
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                head_keys(model, layers)
            for suggested in [k for said in _said(caplog) for k in _hint(said)]:
                caplog.clear()
                with caplog.at_level(logging.WARNING):
                    head_keys(model, suggested)
                assert _said(caplog) == [], (type(model).__name__, layers, suggested)


def test_a_cut_between_whole_blocks_of_a_stage_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """resnet20's last block and the classifier (5): a cut between two blocks of a Stage (a module that only holds its
    blocks' ModuleList) keeps every layer whole, and stays the advice for a head of 2."""
    model = build_model("resnet20", (3, 32, 32), 10, {})
    with caplog.at_level(logging.WARNING):
        head_keys(model, 5)
    assert _said(caplog) == []
    with caplog.at_level(logging.WARNING):
        head_keys(model, 2)
    (said,) = _said(caplog)
    assert "splits layer3.blocks.2 (BasicBlock)" in said and _hint(said) == [5, 1]

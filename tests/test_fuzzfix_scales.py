"""Weights and scales are bounded at float32's largest, declared beside their type (report-fuzzcfg #3).

client.weight_decay, a method's loss weight, a partition's noise, dp-fedavg's clip_norm... took 1e308: the run wrote a
folder and ended "diverged" (exit 3) in round 1, and synthetic's beta leaked numpy's overflow warnings. Each is now an
``options.Scale`` (``Annotated[float, AtMost(FLOAT32_MAX, ...)]``) and parse_options refuses a larger value on its field.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import pytest
import torch

from chillfl.aggregation.ditto import DittoOptions
from chillfl.aggregation.fedlc import FedLCOptions
from chillfl.aggregation.moon import MoonOptions
from chillfl.aggregation.perfedavg import PerFedAvgOptions
from chillfl.aggregation.qffl import QfflOptions
from chillfl.cli import main
from chillfl.config import config_from_dict
from chillfl.data.datasets import SyntheticOptions
from chillfl.data.partition import FeatureNoiseOptions
from chillfl.distillation.methods.comet import COMETOptions
from chillfl.errors import ConfigError
from chillfl.options import FLOAT32_MAX, AtMost, Scale, parse_options
from chillfl.privacy.mechanisms.dp_fedavg import DpFedAvgOptions
from chillfl.prototypes.methods.fedhkd import FedHKDOptions
from chillfl.training.fedalign import FedAlignOptions
from test_fuzzfix_fields import BASE


def test_float32_max_is_torchs() -> None:
    assert FLOAT32_MAX == torch.finfo(torch.float32).max


@pytest.mark.parametrize("cls, key, section", [
    (DittoOptions, "lam", "algorithm"),
    (FedLCOptions, "tau", "algorithm"),
    (PerFedAvgOptions, "alpha", "algorithm"),  # Scale | None
    (QfflOptions, "q", "algorithm"),
    (FedAlignOptions, "mu", "algorithm"),
    (FedHKDOptions, "noise_std", "prototypes"),
    (FedHKDOptions, "lam", "prototypes"),
    (FeatureNoiseOptions, "sigma_max", "partition"),
    (DpFedAvgOptions, "weight_cap", "privacy"),
    (SyntheticOptions, "alpha", "dataset"),
    (MoonOptions, "mu", "algorithm"),
    (QfflOptions, "lipschitz", "algorithm"),  # Scale | None
    (DpFedAvgOptions, "count_noise", "privacy"),
    (COMETOptions, "reg_weight", "distillation"),
])
def test_a_scale_past_float32_is_refused_on_its_field(cls: type, key: str, section: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options(cls, {key: 1e308}, section)
    assert caught.value.field == f"{section}.{key}" and "largest float32" in caught.value.message
    with pytest.raises(ConfigError):
        parse_options(cls, {key: -1e39}, section)  # a size: the sign refused elsewhere, if at all


def test_client_weight_decay_is_refused_at_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base.toml").write_text(BASE)
    assert main(["run", "base.toml", "client.weight_decay=1e308", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["chillfl: error: client.weight_decay: must be at most 3.403e+38 in size (the largest float32, the dtype the "
                   "model computes in: a weight or scale past it overflows the loss, gradient, weights or noise it multiplies), "
                   "got 1e+308"]  # the one line, no traceback before it
    assert config_from_dict({"client": {"weight_decay": FLOAT32_MAX}}).client.weight_decay == FLOAT32_MAX  # the bound itself


def test_synthetic_beta_keeps_its_float32_features_finite() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options(SyntheticOptions, {"beta": FLOAT32_MAX}, "dataset")
    assert caught.value.field == "dataset.beta"
    assert parse_options(SyntheticOptions, {"beta": FLOAT32_MAX / 1e3}, "dataset").beta == FLOAT32_MAX / 1e3


@dataclass(frozen=True)
class _Declared:
    a: Scale | None = None
    b: Annotated[float, AtMost(2.0, "a test's bound")] = 1.0
    c: float = 0.0


def test_a_bound_is_read_from_the_annotation_alone() -> None:
    assert parse_options(_Declared, {"a": None, "b": -2.0, "c": 1e308}, "t") == _Declared(None, -2.0, 1e308)  # c: no bound declared
    with pytest.raises(ConfigError, match=r"t\.b: must be at most 2 in size \(a test's bound\), got 2\.5"):
        parse_options(_Declared, {"b": 2.5}, "t")
    with pytest.raises(ConfigError) as caught:
        parse_options(_Declared, {"a": 1e39}, "t")
    assert caught.value.field == "t.a"


def test_a_bound_is_on_the_size_a_negative_value_past_it_is_refused() -> None:
    """_Declared has no sign check: only the bound, read as a size (abs), can refuse these."""
    with pytest.raises(ConfigError, match=r"t\.b: must be at most 2 in size \(a test's bound\), got -2\.5"):
        parse_options(_Declared, {"b": -2.5}, "t")
    with pytest.raises(ConfigError) as caught:
        parse_options(_Declared, {"a": -1e39}, "t")
    assert caught.value.field == "t.a" and "largest float32" in caught.value.message and "got -1e+39" in caught.value.message

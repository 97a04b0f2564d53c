"""ERA (SCARLET Eq. 2) and Enhanced ERA (Eq. 4) on hand-computed values."""

import math

import pytest
import torch

from chillfl.distillation.era import enhanced_era, entropy, era, mean_soft_labels, power_sharpen
from chillfl.errors import ConfigError
from chillfl.options import parse_options
from chillfl.distillation.methods.dsfl import ERAOptions
from chillfl.distillation.methods.scarlet import EnhancedERAOptions

# Two clients, three classes.
Z = torch.tensor(
    [
        [[0.6, 0.3, 0.1]],  # client 1
        [[0.2, 0.5, 0.3]],  # client 2
    ],
    dtype=torch.float64,
)  # mean = [0.4, 0.4, 0.2]


def test_mean_plain_and_weighted() -> None:
    assert torch.allclose(mean_soft_labels(Z), torch.tensor([[0.4, 0.4, 0.2]], dtype=torch.float64))
    # weights 3:1 -> 0.75 z1 + 0.25 z2 = [0.45+0.05, 0.225+0.125, 0.075+0.075] = [0.5, 0.35, 0.15]
    assert torch.allclose(mean_soft_labels(Z, [3.0, 1.0]), torch.tensor([[0.5, 0.35, 0.15]], dtype=torch.float64))


def test_era_takes_softmax_of_mean_soft_labels() -> None:
    # T = 0.1: softmax([0.4, 0.4, 0.2] / 0.1) = softmax([4, 4, 2]) = [1, 1, e^-2] / (2 + e^-2)
    # e^-2 = 0.1353352832 -> denominator 2.1353352832 -> [0.4683105308, 0.4683105308, 0.0633789383]
    out = era(Z, temperature=0.1)
    assert torch.allclose(out, torch.tensor([[0.4683105308, 0.4683105308, 0.0633789383]], dtype=torch.float64), atol=1e-9)


def test_era_at_t1_is_not_identity() -> None:
    # softmax([0.4, 0.4, 0.2]) = [e^0.2, e^0.2, 1] / (2 e^0.2 + 1); e^0.2 = 1.2214027582
    # denominator 3.4428055163 -> [0.3547693, 0.3547693, 0.2904613]: flatter than the mean
    out = era(Z, temperature=1.0)
    assert torch.allclose(out, torch.tensor([[0.3547693, 0.3547693, 0.2904613]], dtype=torch.float64), atol=1e-7)


def test_enhanced_era_hand_values() -> None:
    # beta = 2: [0.16, 0.16, 0.04] / 0.36 = [4/9, 4/9, 1/9]
    assert torch.allclose(enhanced_era(Z, beta=2.0), torch.tensor([[4 / 9, 4 / 9, 1 / 9]], dtype=torch.float64))
    # weighted mean [0.5, 0.35, 0.15], beta = 2: [0.25, 0.1225, 0.0225] / 0.395
    expected = torch.tensor([[0.25 / 0.395, 0.1225 / 0.395, 0.0225 / 0.395]], dtype=torch.float64)
    assert torch.allclose(enhanced_era(Z, beta=2.0, weights=[3, 1]), expected)


def test_enhanced_era_beta_one_is_identity() -> None:
    g = torch.Generator().manual_seed(0)
    z = torch.softmax(torch.randn(4, 5, 7, generator=g, dtype=torch.float64), dim=-1)
    assert torch.allclose(enhanced_era(z, beta=1.0), mean_soft_labels(z), atol=1e-12)


def test_enhanced_era_keeps_zeros_and_survives_large_beta() -> None:
    p = torch.tensor([[0.4, 0.4, 0.2], [0.5, 0.5, 0.0]], dtype=torch.float64)
    # 0^3 = 0, 0.5^3 / (2 * 0.5^3) = 0.5
    assert torch.equal(power_sharpen(p[1:], 3.0), torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64))
    # beta = 200: (0.2/0.4)^200 = 2^-200 ~ 6e-61 -> [0.5, 0.5, ~0], no NaN
    out = power_sharpen(p[:1], 200.0)
    assert torch.isfinite(out).all()
    assert torch.allclose(out, torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64), atol=1e-50)


def test_entropy_hand_values() -> None:
    # H([0.5, 0.5, 0]) = ln 2 (0 log 0 = 0); H(uniform over 3) = ln 3
    # H([4/9, 4/9, 1/9]) = (8/9) ln(9/4) + (1/9) ln 9 = 0.7208270 + 0.2441361 = 0.9649631
    p = torch.tensor([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3], [4 / 9, 4 / 9, 1 / 9]], dtype=torch.float64)
    assert torch.allclose(entropy(p), torch.tensor([math.log(2), math.log(3), 0.9649631], dtype=torch.float64), atol=1e-7)
    assert entropy(torch.tensor([0.0, 1.0])).item() == 0.0


def test_entropy_strictly_decreasing_in_beta() -> None:
    z = torch.tensor([[[0.7, 0.2, 0.1]]], dtype=torch.float64)  # non-uniform, not one-hot
    betas = [0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0]
    h = [entropy(enhanced_era(z, b)).item() for b in betas]
    assert all(a > b for a, b in zip(h, h[1:])), h
    # beta = 1 keeps the original entropy: -(0.7 ln 0.7 + 0.2 ln 0.2 + 0.1 ln 0.1) = 0.8018186
    assert h[2] == pytest.approx(0.8018186, abs=1e-7)


def test_era_entropy_decreases_as_temperature_decreases() -> None:
    temps = [10.0, 1.0, 0.5, 0.1, 0.05, 0.01]
    h = [entropy(era(Z, t)).item() for t in temps]
    assert all(a > b for a, b in zip(h, h[1:])), h
    # limit T -> 0 is the uniform distribution over the two tied maxima: ln 2
    assert h[-1] == pytest.approx(math.log(2), abs=1e-6)


def test_bad_parameters_raise_config_error_naming_field() -> None:
    with pytest.raises(ConfigError, match="era.temperature"):
        era(Z, 0.0)
    with pytest.raises(ConfigError, match="enhanced_era.beta"):
        enhanced_era(Z, -1.0)
    with pytest.raises(ValueError):
        mean_soft_labels(Z[0])  # not [K, n, C]
    with pytest.raises(ValueError):
        mean_soft_labels(Z, [1.0])  # wrong number of weights
    with pytest.raises(ConfigError, match="dsfl.temperature"):
        parse_options(ERAOptions, {"temperature": -0.5}, "dsfl")
    assert parse_options(EnhancedERAOptions, {"beta": 1.25}, "scarlet").beta == 1.25

"""Adaptive clipping whose clip norm reaches 0 or inf stops the run naming privacy.clip_lr (numext finding 2).

A large clip_lr overflowed ``math.exp`` (an OverflowError traceback), sent C to 0 (every later round averaged zero
updates plus zero noise, exit 0) or to inf (an inf noise, reported as a diverged model naming no privacy option).
"""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.aggregation.base import FedAvg
from chillfl.errors import Diverged
from chillfl.privacy.aggregate import AdaptiveClip, PrivateAggregation
from test_privacy import _results


def test_next_clip_past_exp_range_is_inf_not_an_overflow_error() -> None:
    clip = AdaptiveClip(0.5, 1000.0, 1.0)
    assert clip.next_clip(1.0, -0.5) == math.inf  # exp(1000): math.exp raised OverflowError
    assert clip.next_clip(1e-300, -0.2) == pytest.approx(1e-300 * math.exp(700), rel=1e-12)  # exp(700) alone is finite
    assert clip.next_clip(1e-200, -0.5) == pytest.approx(math.exp(math.log(1e-200) + 1000), rel=1e-9)  # exp(1000) overflows, C e^1000 does not


@pytest.mark.parametrize("quantile, fraction, to", [(0.5, -0.5, "inf"), (0.01, 1.5, "0")])
def test_next_clip_at_0_or_inf_names_clip_lr_and_the_round(quantile: float, fraction: float, to: str) -> None:
    with pytest.raises(Diverged, match=rf"round 4: the adaptive clip norm went from 1 to {to} .*lower privacy.clip_lr") as caught:
        AdaptiveClip(quantile, 1000.0, 1.0).next_clip(1.0, fraction, 3)
    assert "\n" not in str(caught.value)


def test_aggregate_stops_when_the_clip_norm_collapses() -> None:
    # C e^(-1e6 (b - 0.5)): 0 or inf for any noised fraction b but 0.5 exactly
    glob = {"w": torch.zeros(2, dtype=torch.float64)}
    agg = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=0.1, noise_multiplier=1.0, expected=2, seed=11, adaptive=AdaptiveClip(0.5, 1e6, 1.0))
    with pytest.raises(Diverged, match="round 6: .*privacy.clip_lr"):
        agg.aggregate(glob, _results([3.0, 4.0], [0.0, 0.5]), round=5)


def test_a_subnormal_clip_norm_stops_the_run_too() -> None:
    """rev101: C_t = 1e-301 times e^(-20) is 2e-310, subnormal: every later update clipped to (almost) nothing, silently."""
    with pytest.raises(Diverged, match="round 2: the adaptive clip norm went from 1e-301 to 2.06e-310"):
        AdaptiveClip(0.0, 20.0, 1.0).next_clip(1e-301, 1.0, 1)
    assert AdaptiveClip(0.0, 20.0, 1.0).next_clip(1e-290, 1.0, 1) == pytest.approx(1e-290 * math.exp(-20))

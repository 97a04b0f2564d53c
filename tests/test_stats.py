"""Statistics over seeds (chillfl.metrics.stats) on hand-worked values."""

from __future__ import annotations

import math

import pytest

from chillfl.metrics.stats import FRACTION, T975, Bounds, Interval, clip_interval, paired_difference, summarize, t_quantile_975


def test_mean_std_ci_of_1_2_3_4() -> None:
    # mean = 10 / 4 = 2.5; squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5;
    # sample variance 5 / 3, std = sqrt(5/3) = 1.290994;
    # half width = t_{0.975,3} * std / sqrt(4) = 3.182446 * 1.290994 / 2 = 2.054260
    s = summarize([1, 2, 3, 4])
    assert s.n == 4
    assert s.mean == 2.5
    assert s.std == pytest.approx(math.sqrt(5 / 3))
    assert s.half_width == pytest.approx(3.182446 * 1.290994 / 2, abs=1e-5)
    assert s.low == pytest.approx(2.5 - 2.054260, abs=1e-5)
    assert s.high == pytest.approx(2.5 + 2.054260, abs=1e-5)


def test_one_value_has_no_spread() -> None:
    s = summarize([0.7])
    assert (s.mean, s.std, s.low, s.high) == (0.7, None, None, None)
    with pytest.raises(ValueError):
        summarize([])


def test_two_values() -> None:
    # [0, 1]: mean 0.5, std = sqrt(0.5) = 0.707107; half = 12.706205 * 0.707107 / sqrt(2) = 12.706205 / 2 = 6.3531025
    s = summarize([0.0, 1.0])
    assert s.std == pytest.approx(math.sqrt(0.5))
    assert s.half_width == pytest.approx(6.3531025)


def test_t_quantiles() -> None:
    # table values from any t table; df = 31 from the Cornish-Fisher expansion vs the table value 2.0395;
    # df = 60: 2.0003; df = 120: 1.9799; large df -> z = 1.95996
    assert t_quantile_975(1) == 12.706205
    assert t_quantile_975(2) == 4.302653
    assert t_quantile_975(30) == 2.042272
    assert t_quantile_975(31) == pytest.approx(2.0395, abs=2e-4)
    assert t_quantile_975(60) == pytest.approx(2.0003, abs=1e-4)
    assert t_quantile_975(120) == pytest.approx(1.9799, abs=1e-4)
    assert t_quantile_975(10**6) == pytest.approx(1.95996, abs=1e-4)
    assert list(T975) == sorted(T975, reverse=True)  # decreasing in df
    with pytest.raises(ValueError):
        t_quantile_975(0)


def test_paired_difference_by_seed() -> None:
    # d = [0.90-0.85, 0.80-0.82, 0.70-0.60] = [0.05, -0.02, 0.10]; mean = 0.13 / 3 = 0.043333;
    # deviations 0.006667, -0.063333, 0.056667 -> squares 4.444e-5 + 4.0111e-3 + 3.2111e-3 = 7.2667e-3;
    # variance 7.2667e-3 / 2 = 3.6333e-3, std = 0.060277; the mean is positive and d > 0 in 2 of 3 seeds
    p = paired_difference([0.90, 0.80, 0.70], [0.85, 0.82, 0.60])
    assert p.differences == pytest.approx((0.05, -0.02, 0.10))
    assert p.summary.mean == pytest.approx(0.043333, abs=1e-6)
    assert p.summary.std == pytest.approx(0.060277, abs=1e-6)
    assert p.summary.half_width == pytest.approx(4.302653 * 0.060277 / math.sqrt(3), abs=1e-5)
    assert (p.sign_holds, p.n) == (2, 3)


def test_paired_vs_unpaired() -> None:
    # A constant shift of 1 on noisy seeds: paired differences are exactly [1, 1, 1] (std 0),
    # while each variant alone has std 10: pairing removes the seed's common part.
    ref = [0.0, 10.0, 20.0]
    p = paired_difference([1.0, 11.0, 21.0], ref)
    assert p.summary.mean == 1.0 and p.summary.std == 0.0 and p.sign_holds == 3
    assert summarize(ref).std == 10.0


def test_zero_and_negative_differences() -> None:
    # d = [0, 0]: no sign, holds in 0 seeds; d = [-1, -3]: mean -2, negative in both
    assert paired_difference([1.0, 2.0], [1.0, 2.0]).sign_holds == 0
    p = paired_difference([0.0, 0.0], [1.0, 3.0])
    assert p.summary.mean == -2.0 and p.sign_holds == 2
    with pytest.raises(ValueError):
        paired_difference([1.0], [1.0, 2.0])


def test_a_bounded_metric_shows_its_interval_clipped_and_flagged() -> None:
    # 0.95, 0.99, 1.00: mean 0.98; deviations -0.03, 0.01, 0.02 -> squares 9e-4 + 1e-4 + 4e-4 = 1.4e-3; variance 7e-4,
    # std 0.026458; half width 4.3027 * 0.026458 / sqrt(3) = 0.065725 -> [0.914275, 1.045725]: past 1 (an accuracy's top)
    s = summarize([0.95, 0.99, 1.0], FRACTION)
    assert s.low == pytest.approx(0.914275, abs=1e-6) and s.high == pytest.approx(1.045725, abs=1e-6)  # the t-interval as computed
    shown = s.shown()
    assert shown is not None and shown.clipped
    assert (shown.low, shown.high) == (s.low, 1.0)  # the low end was inside: unchanged
    # no bounds (a loss): shown as computed, not flagged; no interval at one value
    assert summarize([0.95, 0.99, 1.0]).shown() == Interval(s.low, s.high, False)
    assert summarize([0.5], FRACTION).shown() is None
    # both ends out: 0.0, 0.5, 1.0 -> mean 0.5, std 0.5, half 4.3027 * 0.5 / sqrt(3) = 1.242083 -> [-0.742, 1.742] -> [0, 1]
    assert summarize([0.0, 0.5, 1.0], FRACTION).shown() == Interval(0.0, 1.0, True)
    # inside the range: nothing moves
    assert clip_interval(0.2, 0.4, FRACTION) == Interval(0.2, 0.4, False)
    assert clip_interval(-0.1, 0.4, None) == Interval(-0.1, 0.4, False)


def test_a_paired_difference_of_a_bounded_metric_has_the_difference_range() -> None:
    # x - y for x, y in [0, 1] lies in [0 - 1, 1 - 0] = [-1, 1]; in [2, 5]: [-3, 3]
    assert FRACTION.difference() == Bounds(-1.0, 1.0)
    assert Bounds(2.0, 5.0).difference() == Bounds(-3.0, 3.0)
    # d = [0.9 - 0.1, 0.2 - 0.1] = [0.8, 0.1] (2 seeds): mean 0.45, std sqrt(((0.35)^2 * 2) / 1) = 0.494975;
    # half = 12.7062 * 0.494975 / sqrt(2) = 4.447170 -> [-3.997, 4.897] -> shown [-1, 1], clipped
    p = paired_difference([0.9, 0.2], [0.1, 0.1], FRACTION)
    assert p.summary.bounds == Bounds(-1.0, 1.0)
    assert p.summary.high == pytest.approx(0.45 + 4.447170, abs=1e-5)
    assert p.summary.shown() == Interval(-1.0, 1.0, True)
    assert paired_difference([0.9, 0.2], [0.1, 0.1]).summary.bounds is None
    with pytest.raises(ValueError, match="low < high"):
        Bounds(1.0, 1.0)


def test_a_shown_interval_is_printed_with_the_shared_mark() -> None:
    """format_interval: x 100, two decimals, a + on positive ends when signed, the dagger only when an end moved; scaled
    bounds: [0, 1] x 100 = [0, 100] points, whose difference range is [-100, 100]."""
    from chillfl.metrics.stats import CLIPPED, any_clipped, format_interval

    assert format_interval(Interval(0.914275, 1.0, True)) == "[91.43, 100.00]" + CLIPPED == "[91.43, 100.00]†"
    assert format_interval(Interval(-0.0803, 0.5449, False), signed=True) == "[-8.03, +54.49]"
    assert format_interval(Interval(-0.49367, 1.0, True), signed=True, lead="95 % CI ") == "[95 % CI -49.37, +100.00]†"
    assert format_interval(Interval(1.5, 2.25, False), scale=1.0) == "[1.50, 2.25]"
    assert any_clipped(["a", "[0.00, 1.00]†"]) and not any_clipped(["a", "[0.00, 1.00]"])
    assert FRACTION.scaled(100.0) == Bounds(0.0, 100.0) and FRACTION.scaled(100.0).difference() == Bounds(-100.0, 100.0)
    with pytest.raises(ValueError, match="positive"):
        FRACTION.scaled(0.0)

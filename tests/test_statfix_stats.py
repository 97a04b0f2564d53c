"""Statistics that float rounding must not move: the sign of a zero mean difference, the t quantiles.

Hand-worked numbers; every test here failed before its fix (statfix F2, F6)."""

from __future__ import annotations

import math

import pytest

from chillfl.metrics.stats import T975, ZERO_TOLERANCE, paired_difference, summarize, t_quantile_975
from chillfl.reproduce import accuracy_verdict


def test_a_mean_difference_that_is_zero_up_to_rounding_has_no_sign() -> None:
    # 0.125 + 0.041667 - 0.166667 = 0 exactly, but its float sum is -1.85e-17: printed "-0.00 ... sign holds 1/3"
    measured, verdict = accuracy_verdict([0.125, 0.04166666666666663, -0.16666666666666669])
    assert measured.startswith("+0.00 ± ") and measured.endswith("sign holds 0/3") and verdict == "does not at this scale"
    # accuracies of 24 rows: base 1/24, 1/24, 4/24; variant 4/24, 2/24, 0: differences 3/24 + 1/24 - 4/24 = 0, summed 2.3e-18
    p = paired_difference([4 / 24, 2 / 24, 0.0], [1 / 24, 1 / 24, 4 / 24])
    assert p.summary.mean == 0.0 and math.copysign(1.0, p.summary.mean) == 1.0 and p.sign_holds == 0
    assert p.summary.low == pytest.approx(-p.summary.high) and p.summary.std == summarize(p.differences).std
    # a small but real mean (1e-9 of values near 0.5) keeps its sign
    small = paired_difference([0.5 + 3e-9, 0.5 - 1e-9, 0.5 + 1e-9], [0.5, 0.5, 0.5])
    assert small.summary.mean > 0 and small.sign_holds == 2
    assert 1e-9 > ZERO_TOLERANCE * 0.5


def _two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with ``df`` (whole) degrees of freedom, in closed form (Abramowitz and Stegun 26.7.3/4)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # odd: 2/pi (theta + sin cos (1 + 2/3 cos^2 + 2.4/(3.5) cos^4 + ...)), the sum up to cos^(df-2)
        total, term = 0.0, math.cos(theta)
        for j in range(1, df - 1, 2):
            total += term
            term *= c2 * (j + 1) / (j + 2)
        return 2 / math.pi * (theta + math.sin(theta) * total)
    total, term = 0.0, 1.0  # even: sin (1 + 1/2 cos^2 + 1.3/(2.4) cos^4 + ...), up to cos^(df-2)
    for j in range(0, df - 1, 2):
        total += term
        term *= c2 * (j + 1) / (j + 2)
    return math.sin(theta) * total


def _quantile_975(df: int) -> float:
    low, high = 1.0, 20.0
    for _ in range(200):  # bisection to the float's precision
        mid = (low + high) / 2
        low, high = (mid, high) if _two_sided(mid, df) < 0.95 else (low, mid)
    return (low + high) / 2


def test_the_t_table_has_six_correct_decimals() -> None:
    # the 4-decimal table was off by up to 5e-5 (12.7062 for 12.706205), which moved a printed interval's end by 0.01
    assert _two_sided(1.0, 1) == pytest.approx(0.5) and _two_sided(2.0, 2) == pytest.approx(2 / math.sqrt(6))  # the CDF itself
    assert len(T975) == 30
    for df in range(1, 31):
        assert abs(t_quantile_975(df) - _quantile_975(df)) <= 5.1e-7, df
    known = {1: 12.706205, 2: 4.302653, 3: 3.182446, 5: 2.570582, 10: 2.228139, 30: 2.042272}
    assert {df: t_quantile_975(df) for df in known} == known
    assert abs(t_quantile_975(31) - _quantile_975(31)) < 2e-6  # the expansion beyond the table


def test_a_printed_interval_end_follows_the_exact_quantile() -> None:
    # 3 seeds, mean 0, std 1 (values -1, 0, 1): half width t(0.975, 2) / sqrt(3) = 4.302653 / 1.732051 = 2.484138:
    # the 4-decimal 4.3027 gave 2.484165; in points (x 100) the end printed 248.42 where the exact one is 248.41
    s = summarize([-1.0, 0.0, 1.0])
    assert f"{100 * s.high:.2f}" == "248.41" and s.half_width == pytest.approx(2.484138, abs=1e-6)

"""Pearson correlation table of client measures vs. best temperature (FedChill A.5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chillfl.metrics.correlation import correlation_table, format_table


def test_known_correlations() -> None:
    temps = np.array([1.0, 3.0, 5.0, 7.0, 9.0])
    rows = correlation_table(
        {
            # exactly linear, increasing -> r = 1, p = 0
            "linear": np.array([0.0, 1.0, 2.0, 3.0, 4.0]),
            # exactly linear, decreasing -> r = -1
            "negative": np.array([4.0, 3.0, 2.0, 1.0, 0.0]),
            # deviations (.4,-.6,.4,-.6,.4) . (-4,-2,0,2,4) = -1.6 + 1.2 + 0 - 1.2 + 1.6 = 0 -> r = 0, p = 1
            "orthogonal": np.array([1.0, 0.0, 1.0, 0.0, 1.0]),
        },
        temps,
    )
    assert [r["measure"] for r in rows] == ["linear", "negative", "orthogonal"]
    assert rows[0]["r"] == pytest.approx(1.0) and rows[0]["p"] == pytest.approx(0.0, abs=1e-9)
    assert rows[1]["r"] == pytest.approx(-1.0)
    assert rows[2]["r"] == pytest.approx(0.0, abs=1e-12) and rows[2]["p"] == pytest.approx(1.0)
    assert all(r["n"] == 5 for r in rows)


def test_p_value_by_hand() -> None:
    # x = (1, 2, 3), y = (1, 3, 2): deviations (-1, 0, 1), (-1, 1, 0): cov 1, var 2 and 2 -> r = 1/2
    # t = r sqrt(n - 2) / sqrt(1 - r^2) = 0.5 / 0.866 = 1/sqrt(3); df = 1 is the Cauchy law:
    # p = 2 (1 - (1/2 + atan(1/sqrt 3)/pi)) = 2 (1/2 - 1/6) = 2/3
    (row,) = correlation_table({"x": np.array([1.0, 2.0, 3.0])}, np.array([1.0, 3.0, 2.0]))
    assert row["r"] == pytest.approx(0.5)
    assert row["p"] == pytest.approx(2 / 3)


def test_constant_measure_gives_nan() -> None:
    (row,) = correlation_table({"size": np.full(4, 50.0)}, np.array([0.1, 0.2, 0.3, 0.5]))
    assert math.isnan(row["r"]) and math.isnan(row["p"])
    assert row["undefined"] == "size is 50 for every client"


def test_the_printed_table_says_why_r_is_nan() -> None:
    # a two-temperature sweep often gives every client the same best T: the table printed nan with no word on why
    rows = correlation_table({"ratio": np.array([0.1, 0.5, 0.9]), "size": np.array([10.0, 20.0, 30.0])}, np.full(3, 0.05))
    assert all(math.isnan(r["r"]) for r in rows)
    lines = format_table(rows).splitlines()
    assert lines[-1] == "nan: no r, every client's value is 0.05: nothing to correlate with" and len(lines) == 4  # header, 2 rows, one note
    both = correlation_table({"size": np.full(3, 7.0), "ratio": np.array([0.1, 0.5, 0.9])}, np.array([0.1, 1.0, 0.5]))
    assert format_table(both).splitlines()[-1] == "nan: no r, size is 7 for every client" and "undefined" not in both[1]


def test_shape_errors() -> None:
    with pytest.raises(ValueError, match="shape"):
        correlation_table({"a": np.arange(3.0)}, np.arange(4.0))
    with pytest.raises(ValueError):
        correlation_table({"a": np.arange(1.0)}, np.arange(1.0))


def test_format_table() -> None:
    rows = [
        {"measure": "ratio", "r": -0.389, "p": 0.267, "n": 10},
        {"measure": "gini", "r": 0.198, "p": 0.5834, "n": 10},
    ]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["measure", "r", "p", "n"]
    assert lines[1].split() == ["ratio", "-0.389", "0.267", "10"]
    assert lines[2].split() == ["gini", "0.198", "0.583", "10"]


def test_a_non_finite_value_gives_nan_and_says_why() -> None:
    t = np.array([0.1, 0.2, 0.5, 0.3])
    rows = correlation_table({"kl": np.array([0.1, np.inf, 0.3, 0.2]), "size": np.array([1.0, 2.0, 3.0, 5.0])}, t)
    assert math.isnan(rows[0]["r"]) and rows[0]["undefined"] == "kl is not finite (nan or inf) for some client"
    # by hand: deviations (-1.75, -0.75, 0.25, 2.25) and (-0.175, -0.075, 0.225, 0.025): r = 0.475 / sqrt(8.75 * 0.0875) = 0.475 / 0.875
    assert rows[1]["r"] == pytest.approx(0.475 / 0.875) and "undefined" not in rows[1]
    (row,) = correlation_table({"size": np.array([1.0, 2.0, 3.0, 5.0])}, np.array([0.1, np.nan, 0.5, 0.3]))
    assert math.isnan(row["r"]) and row["undefined"] == "a client's value is not finite (nan or inf)"

"""FedChill class counts that are each finite but sum past float64's max (temperature.class_counts).

[1e308, 1e308] is a balanced client: it must score exactly as [1, 1]. Before, counts / counts.sum() was
all zeros (sum = inf): the ratio measure scored it as maximally heterogeneous, entropy/kl/js gave NaN or
a wrong h_n, so FedChill's start temperature came out wrong without a word. Counts whose sum is finite
are scored as before, bit for bit.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from chillfl.errors import ConfigError
from chillfl.temperature.heterogeneity import MEASURES, client_heterogeneity, heterogeneity

SCALE_FREE = sorted(set(MEASURES) - {"size"})  # size reads the dataset size itself


@pytest.mark.parametrize("measure", SCALE_FREE)
def test_huge_counts_score_as_their_proportions(measure: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning either
        huge = heterogeneity([[1e308, 1e308], [1e308, 0.0]], measure)
    assert np.array_equal(huge, heterogeneity([[1.0, 1.0], [1.0, 0.0]], measure))
    assert huge[0] == pytest.approx(0.0, abs=1e-12)  # balanced client: like the uniform p_g
    assert huge[1] == 1.0  # one-class client: as skewed as possible (2 classes)


def test_huge_counts_ratio_by_hand() -> None:
    # [1.5e308, 0.5e308]/max = [1, 1/3]: p = [0.75, 0.25]; |1.5 - 1| + |0.5 - 1| = 1, max 1/0.5 + 2 - 2 = 2
    assert heterogeneity([[1.5e308, 0.5e308]], "ratio")[0] == 0.5


def test_huge_counts_gini_when_only_the_pairwise_sum_overflows() -> None:
    # sum 1.1e308 is finite but sum_ij |x_i - x_j| = 4 * 0.9e308 overflows; Gini = 0.9/(2 * 1.1) / (1/2) normalised
    h = heterogeneity([[1e308, 0.1e308]], "gini", normalisation="none")[0]
    assert h == pytest.approx(0.9 / 2.2, rel=1e-15)


def test_huge_counts_refused_for_the_size_measure() -> None:
    with pytest.raises(ConfigError, match="temperature.class_counts"):
        heterogeneity([[1e308, 1e308], [1.0, 1.0]], "size")


def test_ordinary_counts_score_as_before() -> None:
    counts = np.array([[3.0, 1.0], [7.0, 0.0], [2.0, 2.0]])
    p = counts / counts.sum(axis=1, keepdims=True)
    ratio = np.abs(p / 0.5 - 1.0).sum(axis=1) / 2.0  # Eq. 6 over its max 1/p_min + C - 2 = 2
    assert np.array_equal(heterogeneity(counts, "ratio"), ratio)
    gini = np.array([2.0 / 8.0, 14.0 / 28.0, 0.0]) / 0.5  # sum_ij |x_i - x_j| / (2 C n), over (C - 1)/C
    assert np.array_equal(heterogeneity(counts, "gini"), gini)
    assert np.array_equal(heterogeneity(counts, "size"), (counts.sum(axis=1) - 7.0) / (0.0 - 7.0))  # (raw - least)/(most - least)


def test_one_client_scores_huge_counts_as_their_proportions() -> None:
    """A client computing its own h_n (the start temperature's input, Eq. 7) from its label counts."""
    assert client_heterogeneity([1e308, 1e308, 0.5e308], "js") == client_heterogeneity([2.0, 2.0, 1.0], "js")


def test_huge_counts_keep_a_small_count_for_the_active_measure() -> None:
    assert MEASURES["active"](np.array([1.5e308, 1.5e308, 1e-5])) == MEASURES["active"](np.array([1.5, 1.5, 1e-5])) == 3


def test_counts_a_rescale_would_flush_to_zero_are_refused() -> None:
    """1e-20 beside 1.5e308 cannot be kept by any rescale that makes the sum finite: dividing by the max rounded it to 0
    and 'active' counted 2 classes where the same proportions count 3 (rev107 3); refused now."""
    with pytest.raises(ConfigError, match="span more than float64's range"):
        heterogeneity([[1.5e308, 1.5e308, 1e-20]], "active")

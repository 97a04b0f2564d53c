"""FedChill's p_g priors that are each finite but sum past float64's max (report-numeric #5).

p_g = (1e308,) * 10 is the uniform prior: it must score exactly as p_g = (1,) * 10 (an iid client 0, a one-class
client 1). Before, arr / arr.sum() was all zeros: the ratio measure raised ZeroDivisionError, js scored the iid
client 1 ("most heterogeneous").
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from chillfl.temperature.heterogeneity import MEASURES, heterogeneity, reference_distribution

COUNTS = np.array([[5.0] * 10, [50.0] + [0.0] * 9])


def test_huge_priors_normalise_to_the_uniform_prior() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning either
        p = reference_distribution([1e308] * 10, 10)
    assert np.array_equal(p, np.full(10, 0.1))
    assert np.array_equal(reference_distribution([1e308, 0.75e308, 0.25e308], 3), np.array([0.5, 0.375, 0.125]))


@pytest.mark.parametrize("measure", sorted(MEASURES))
def test_huge_priors_score_as_the_uniform_prior(measure: str) -> None:
    h = heterogeneity(COUNTS, measure, [1e308] * 10)
    assert np.array_equal(h, heterogeneity(COUNTS, measure, [1.0] * 10))
    assert h[0] == pytest.approx(0.0, abs=1e-12)


def test_ordinary_priors_normalise_as_before() -> None:
    priors = np.array([3.0, 1.0, 7.0, 0.25])
    assert np.array_equal(reference_distribution(priors, 4), priors / priors.sum())

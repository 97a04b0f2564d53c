"""kNN-Per's ``sigma`` has a lower end (cfgblank 2): below about d / 1.8e308, d / sigma overflowed float64 and inf - inf
made every neighbour's weight NaN, so ``sigma = 1e-320`` ran with every local loss NaN (a warning, the run went on)."""

from __future__ import annotations

import pytest
import torch

from chillfl.aggregation.knnper import MIN_SIGMA, KNNPerOptions, knn_probs
from chillfl.errors import ConfigError
from chillfl.options import parse_options

STORE_X = torch.tensor([[0.0], [3.0]])
STORE_Y = torch.tensor([0, 1])


def test_a_subnormal_sigma_made_p_knn_nan() -> None:
    """The break the lower bound prevents: the query at distance 1 and 2 from the two entries."""
    query = torch.tensor([[1.0]])
    assert torch.isnan(knn_probs(query, STORE_X, STORE_Y, 2, k=2, sigma=1e-320)).all()
    # at the bound: the nearest neighbour alone (1 and exp(-1e200) = 0), finite
    assert knn_probs(query, STORE_X, STORE_Y, 2, k=2, sigma=MIN_SIGMA).tolist() == [[1.0, 0.0]]


@pytest.mark.parametrize("kernel", ["distance", "squared"])
def test_the_bound_keeps_the_farthest_float32_representations_finite(kernel: str) -> None:
    """The largest distance float32 representations can be apart (each coordinate 2 x FLOAT32_MAX) over MIN_SIGMA
    stays finite in float64, so no NaN weight at any sigma the options take."""
    top = torch.finfo(torch.float32).max
    store = torch.tensor([[-top] * 4, [top] * 4])
    query = torch.tensor([[top] * 4])
    p = knn_probs(query, store, STORE_Y, 2, k=2, sigma=MIN_SIGMA, kernel=kernel)  # type: ignore[arg-type]
    assert p.tolist() == [[0.0, 1.0]]
    p = knn_probs(torch.tensor([[0.0] * 4]), store, STORE_Y, 2, k=2, sigma=MIN_SIGMA, kernel=kernel)  # type: ignore[arg-type]
    assert p.tolist() == [[0.5, 0.5]]  # equidistant, at about 1.4e39: both weigh exp(-0) = 1


def test_sigma_below_the_bound_is_refused_on_its_field() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options(KNNPerOptions, {"sigma": 1e-320}, "algorithm")
    assert caught.value.field == "algorithm.sigma" and caught.value.message.startswith("must be a finite number >= 1e-200")
    assert parse_options(KNNPerOptions, {"sigma": MIN_SIGMA}, "algorithm").sigma == MIN_SIGMA
    assert parse_options(KNNPerOptions, {"sigma": 1e-3}, "algorithm").sigma == 1e-3

"""``[dataset.augment] normalize`` constants a float32 input cannot take are refused on the field, before any data is
loaded: a NaN mean or a std of 1e-40 made every input NaN or infinite and the run "diverged" in round 1."""
from __future__ import annotations

import math

import pytest

from chillfl.data.augment import norm_stats
from chillfl.errors import ConfigError


@pytest.mark.parametrize("value", [
    [[math.nan], [1.0]], [[0.0], [math.inf]], [[0.0], [1e-40]], [[1e39], [1.0]], [[0.0], [1e39]], [[-math.inf], [1.0]],
])
def test_constants_outside_float32_are_refused(value: list[list[float]]) -> None:
    with pytest.raises(ConfigError) as caught:
        norm_stats(value, "dataset.augment.normalize")
    assert caught.value.field == "dataset.augment.normalize"


def test_ordinary_and_edge_constants_pass() -> None:
    assert norm_stats([[0.5, -3.0], [0.25, 1.2e-38]], "f") == ((0.5, -3.0), (0.25, 1.2e-38))


def test_constants_that_put_the_inputs_past_float32_are_refused() -> None:
    """Each constant finite, the scaled inputs not: (x - 1e38) / 0.1 overflows (rev112b 2)."""
    import torch

    from chillfl.data.augment import AugmentOptions, rescaler

    scale = rescaler(AugmentOptions(normalize=[[1e38], [0.1]]), [0.0], [1.0], 1, "toy")
    assert scale is not None
    with pytest.raises(ConfigError) as caught:
        scale(torch.zeros(2, 1, 2, 2))
    assert caught.value.field == "dataset.augment.normalize" and "past float32's range" in caught.value.message
    fine = rescaler(AugmentOptions(normalize=[[0.5], [0.25]]), [0.0], [1.0], 1, "toy")
    assert fine is not None and torch.equal(fine(torch.ones(1, 1, 1, 1)), torch.full((1, 1, 1, 1), 2.0))

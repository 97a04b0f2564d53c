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

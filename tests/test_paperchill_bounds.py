"""FedChill's temperature bounds: an inverted pair is refused on the field the user moved off its default."""
from __future__ import annotations

import pytest

from chillfl.errors import ConfigError
from chillfl.temperature.fedchill import FedChillOptions


@pytest.mark.parametrize(("options", "field", "text"), [
    ({"t_min": 1.5}, "temperature.t_min", "must be <= t_max = 1.0, got 1.5"),  # named t_max, left at its default, before
    ({"t_max": 0.01}, "temperature.t_max", "must be >= t_min = 0.05, got 0.01"),
    ({"t_min": 0.5, "t_max": 0.2}, "temperature.t_max", "must be >= t_min = 0.5, got 0.2"),
])
def test_an_inverted_pair_names_the_moved_bound(options: dict[str, float], field: str, text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        FedChillOptions(**options).validate("temperature")
    assert caught.value.field == field and text in str(caught.value)


@pytest.mark.parametrize(("options", "field"), [({"sigma_min": 0.5}, "partition.sigma_min"), ({"sigma_max": 0.05}, "partition.sigma_max")])
def test_feature_noise_names_the_moved_bound(options: dict[str, float], field: str) -> None:
    """The same rule for the feature-noise partition's std range (FedChill Table 6's [0.1, 0.3] by default)."""
    from chillfl.data.partition import FeatureNoiseOptions

    with pytest.raises(ConfigError) as caught:
        FeatureNoiseOptions(**options).validate("partition")
    assert caught.value.field == field

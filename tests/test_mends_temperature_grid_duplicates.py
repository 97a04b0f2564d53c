"""analyze temperature-sweep's --temperatures: a repeated value is refused in one line naming the field, as compare's
grids refuse one; it was dropped without a word (0.1,0.5,0.1 ran the grid 0.1, 0.5)."""

from __future__ import annotations

import pytest

from chillfl.analysis.temperature_sweep import TEMPERATURES_FIELD, parse_temperatures
from chillfl.errors import ConfigError


@pytest.mark.parametrize("text", ["0.1,0.5,0.1", "1,1", [0.5, 0.5, 1.0]])
def test_a_repeated_temperature_is_refused(text: str | list[float]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_temperatures(text)
    assert caught.value.field == TEMPERATURES_FIELD
    assert "duplicate values" in caught.value.message


def test_distinct_temperatures_come_back_sorted() -> None:
    assert parse_temperatures("1,0.05,0.5") == [0.05, 0.5, 1.0]

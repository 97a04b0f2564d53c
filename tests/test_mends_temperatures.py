"""The temperature sweep's grid is checked by the run's own temperature check (one range, one message)."""

from __future__ import annotations

import pytest

from chillfl.analysis.temperature_sweep import TEMPERATURES_FIELD, parse_temperatures
from chillfl.errors import ConfigError
from chillfl.temperature.base import require_temperature


@pytest.mark.parametrize("bad", ["1e-30", "1e308", "nan", "-1"])
def test_a_grid_point_is_refused_with_the_runs_own_message(bad: str) -> None:
    """parse_temperatures wrote its own range test and message; it now says what a run's T says, naming --temperatures."""
    with pytest.raises(ConfigError) as shared:
        require_temperature(float(bad), TEMPERATURES_FIELD)
    with pytest.raises(ConfigError) as sweep:
        parse_temperatures(f"1,{bad}")
    assert str(sweep.value) == str(shared.value)
    assert sweep.value.field == "--temperatures" and len(str(sweep.value).splitlines()) == 1

"""The saved config.toml is written with tomli-w and reads back to the very same config, for every bundled experiment."""

from __future__ import annotations

import sys

import pytest

from chillfl.config import config_from_dict, load_config
from chillfl.storage.results import to_toml
from chillfl.experiments import bundled_experiments, resolve_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.mark.parametrize("name", bundled_experiments())
def test_every_bundled_config_round_trips_exactly(name: str) -> None:
    config = load_config(resolve_config(name))
    text = to_toml(config.to_dict())
    assert config_from_dict(tomllib.loads(text)) == config


def test_lists_of_tables_and_nested_values_round_trip() -> None:
    data = {"name": "x", "variants": {"a": {"client": {"lr": 0.1}}}, "dataset": {"name": "digits", "layers": [{"w": 1}, {"w": 2}]}, "gone": None}
    back = tomllib.loads(to_toml(data))
    assert back == {"name": "x", "variants": {"a": {"client": {"lr": 0.1}}}, "dataset": {"name": "digits", "layers": [{"w": 1}, {"w": 2}]}}

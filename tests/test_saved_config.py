"""The saved config.toml is written with tomli-w and reads back to the very same config, for every bundled experiment."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from chillfl.config import OPTIONAL_TABLES, config_from_dict, load_config
from chillfl.resolve import resolved
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


@pytest.mark.parametrize("name", bundled_experiments())
def test_every_bundled_config_round_trips_as_a_run_folder_saves_it(name: str) -> None:
    """A run folder's config.toml leaves out the tables left empty (an empty [variants], [compare] and [tune] were in
    every run's): read back, it is the same config, and so is the resolved one."""
    config = load_config(resolve_config(name))
    saved = tomllib.loads(to_toml(config.to_saved_dict()))
    assert [key for key in OPTIONAL_TABLES if key in saved and not saved[key]] == []
    assert {key for key in OPTIONAL_TABLES if key in saved} == {key for key in OPTIONAL_TABLES if config.to_dict()[key]}
    assert config_from_dict(saved) == config
    one_run = dataclasses.replace(config, variants={}, compare={}, tune={})  # what each run of a comparison saves
    assert resolved(config_from_dict(tomllib.loads(to_toml(one_run.to_saved_dict())))) == resolved(one_run)


def test_lists_of_tables_and_nested_values_round_trip() -> None:
    data = {"name": "x", "variants": {"a": {"client": {"lr": 0.1}}}, "dataset": {"name": "digits", "layers": [{"w": 1}, {"w": 2}]}, "gone": None}
    back = tomllib.loads(to_toml(data))
    assert back == {"name": "x", "variants": {"a": {"client": {"lr": 0.1}}}, "dataset": {"name": "digits", "layers": [{"w": 1}, {"w": 2}]}}

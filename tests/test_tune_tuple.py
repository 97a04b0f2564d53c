"""A ``[tune]`` grid given as a Python tuple of values is the list ``grid=`` and ``tune=`` take, not a refusal."""

from __future__ import annotations

import pytest

from chillfl.config import config_from_dict
from chillfl.errors import ConfigError


def test_a_tuple_of_tuning_values_is_a_list() -> None:
    config = config_from_dict({"tune": {"client.lr": (0.1, 0.2)}, "variants": {"a": {"tune": {"client.momentum": (0.0, 0.9)}}}})
    assert config.tune == {"client.lr": [0.1, 0.2]}
    assert config.variants["a"]["tune"] == {"client.momentum": [0.0, 0.9]}
    assert config_from_dict({"tune": {"client": {"lr": (0.1,)}}}).tune == {"client.lr": [0.1]}  # the nested form too


def test_other_shapes_are_still_refused() -> None:
    with pytest.raises(ConfigError, match=r"^tune\.client\.lr: expected a non-empty list"):
        config_from_dict({"tune": {"client.lr": ()}})
    with pytest.raises(ConfigError, match=r"^tune\.client\.lr: expected a non-empty list"):
        config_from_dict({"tune": {"client.lr": 0.1}})

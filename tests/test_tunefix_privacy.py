"""A soft-label method whose clients upload no row (``individual``) refuses a mechanism that would privatise nothing."""

from __future__ import annotations

import pytest

from chillfl.config import RunConfig, load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_data
from chillfl.privacy.build import plan_privacy


def _config(method: str) -> RunConfig:
    return load_config(None, {"dataset.name": "digits", "federation.num_clients": 4, "federation.rounds": 1,
                              "privacy.mechanism": "local", "privacy.noise_multiplier": 5.0}).with_overrides({"distillation": {"method": method, "public_size": 400, "subset_size": 100}})


def test_local_dp_under_a_method_that_uploads_nothing_is_refused() -> None:
    config = _config("individual")
    with pytest.raises(ConfigError) as err:
        plan_privacy(config, build_data(config))
    assert err.value.field == "privacy.mechanism"
    assert err.value.message.startswith("'local' privatises soft-label rows, and distillation method 'individual' uploads none (no collaboration)")


def test_local_dp_under_a_method_that_uploads_rows_still_plans() -> None:
    config = _config("dsfl")
    plan = plan_privacy(config, build_data(config))
    assert plan is not None and plan.mechanism == "local"

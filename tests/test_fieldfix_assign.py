"""An unknown model name in ``model.assign`` (a list of names) is refused on its entry, ``model.assign[i]``, as
``[[model.groups]]`` errors name ``model.groups[i].name``; it was ``model.assign.name``, a field that does not exist."""

from __future__ import annotations

import pytest

from chillfl.errors import ConfigError
from chillfl.models.assign import arch_section, plan_models


def test_an_unknown_assigned_name_names_its_entry() -> None:
    with pytest.raises(ConfigError) as info:
        plan_models({"name": "mlp", "assign": ["mlp", "mlpp", "mlp"]}, 3)
    assert info.value.field == "model.assign[1]" and "unknown value 'mlpp'" in info.value.message


def test_an_assigned_architecture_is_recorded_under_its_first_entry() -> None:
    plan = plan_models({"name": "mlp", "assign": ["mlp", "mcmahan_cnn", "mcmahan_cnn"]}, 3)
    assert plan.arch_of == (0, 1, 1) and arch_section(plan, 1) == "model.assign[1]"

"""A Flower run refuses a config that ``[compare]`` options or a ``[tune]`` grid make a comparison's, naming the field.

Before, only ``variants`` was refused: a config with ``compare.seeds = [0, 1, 2]`` or ``[tune] "client.lr" = [...]``
(which ``chillfl run`` runs as a comparison, and ``chillfl.run()`` warns about) ran once at its ``seed`` under Flower,
with no word, and its ``config.toml`` recorded both tables.
"""

from __future__ import annotations

from typing import Any

import pytest

from chillfl.config import config_from_dict
from chillfl.errors import ConfigError
from chillfl.flower.apps import check_supported

TUNED = {"tune": {"client.lr": [0.01, 0.1]}, "eval": {"validation": 0.1}}


@pytest.mark.parametrize(("parts", "field"), [
    ({"compare": {"seeds": [0, 1, 2]}}, "compare.seeds"),
    (TUNED, "tune"),
    ({**TUNED, "compare": {"select": "best", "seeds": [0, 1]}}, "compare.seeds"),
    ({"compare": {"controls": True}}, "compare.controls"),
], ids=["seeds", "tune", "tune-and-seeds", "controls"])
def test_a_comparisons_config_is_refused_naming_the_field(parts: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_supported(config_from_dict({"seed": 3, **parts}))
    assert err.value.field == field
    assert err.value.message.startswith("a Flower run runs one experiment") and "seed = 3" in err.value.message
    assert "\n" not in str(err.value)


def test_a_config_of_one_run_is_still_carried() -> None:
    check_supported(config_from_dict({"seed": 3}))


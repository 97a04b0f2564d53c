"""``chillfl.compare(select=...)`` of the wrong type or value: one ConfigError naming ``select``, not a message about something else.

``chillfl.compare(select=1)`` (no tuning grid) said ``1 picks each variant's tuning point, and this comparison tunes nothing``,
and ``select="bst"`` the same: the mistake was the value, not the missing grid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chillfl
from chillfl.errors import ConfigError


@pytest.mark.parametrize("select", [1, ["best"], "bst"])
def test_compare_refuses_a_select_that_is_no_rule_naming_select(select: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        chillfl.compare(select=select, out_dir=tmp_path, progress=False, write=False)
    err = info.value
    assert err.field == "select", str(err)
    assert "\n" not in str(err)
    assert "expected a tuning rule, one of 'final', 'best', 'local_final', 'local_best', got" in err.message, str(err)
    assert "picks each variant's tuning point" not in err.message
    assert not any(tmp_path.iterdir())


def test_a_select_rule_without_a_grid_is_still_told_it_tunes_nothing() -> None:
    with pytest.raises(ConfigError, match="^select: 'best' picks each variant's tuning point, and this comparison tunes nothing"):
        chillfl.compare(select="best", progress=False, write=False)

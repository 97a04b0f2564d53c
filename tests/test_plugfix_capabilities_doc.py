"""docs/extending.md's capabilities table names ``[privacy]`` among the readers of ``takes_weights``, ``not_a_base`` and
``personal_model``: dp-fedavg refuses a rule without ``takes_weights``, and ``local`` one with ``not_a_base`` or
``personal_model`` unless it takes weights (privacy/build.py), which a plugin author reading the table could not tell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def readers(field: str) -> str:
    """The "what reads it" cell of the capabilities table's row for ``field``."""
    row = re.search(rf"^\| `{field}[=`].*$", DOC.read_text(encoding="utf-8"), flags=re.M)
    assert row is not None, f"no capabilities row for {field}"
    return row.group(0).rstrip(" |").rsplit(" | ", 1)[-1]


@pytest.mark.parametrize("field,mechanisms", [("takes_weights", ('"dp-fedavg"', '"local"')), ("not_a_base", ('"local"',)),
                                              ("personal_model", ('"local"',))])
def test_the_privacy_mechanisms_are_named_where_they_read_the_capability(field: str, mechanisms: tuple[str, ...]) -> None:
    cell = readers(field)
    assert "`[privacy]`" in cell and all(m in cell for m in mechanisms), cell

"""``chillfl.numeric``: the one home of "a number: an int or a float, not a bool" (it was written out a dozen times).

A bool is an int to ``isinstance``, so TOML's ``true`` would pass for 1; each predicate refuses it. NumPy's
``float64`` subclasses ``float`` and counts; its integers, ``float32`` and ``bool_`` do not (the copies the
module replaced answered the same, and the behaviour at their call sites must not change).
"""

from __future__ import annotations

import ast
import math
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from chillfl.numeric import is_finite_real, is_real, is_whole

SRC = Path(__file__).resolve().parents[1] / "src" / "chillfl"

CASES = [
    # value, is_real, is_finite_real, is_whole
    (True, False, False, False),
    (False, False, False, False),
    (0, True, True, True),
    (-3, True, True, True),
    (10**400, True, True, True),  # too large for a float, still a finite whole number (math.isfinite would raise)
    (0.5, True, True, False),
    (3.0, True, True, False),  # a whole float is no int: a seed or an index is written without the point
    (math.nan, True, False, False),
    (math.inf, True, False, False),
    (-math.inf, True, False, False),
    (np.float64(0.25), True, True, False),  # a float subclass
    (np.float64("nan"), True, False, False),
    (np.float32(0.25), False, False, False),
    (np.int64(2), False, False, False),
    (np.bool_(True), False, False, False),
    (None, False, False, False),
    ("1", False, False, False),
    (Decimal("1.5"), False, False, False),
    ([1], False, False, False),
]


@pytest.mark.parametrize(("value", "real", "finite", "whole"), CASES, ids=[repr(c[0])[:24] for c in CASES])
def test_each_predicate_on_each_kind_of_value(value: object, real: bool, finite: bool, whole: bool) -> None:
    assert (is_real(value), is_finite_real(value), is_whole(value)) == (real, finite, whole)


def test_the_predicates_nest() -> None:
    """Whole implies finite implies real, for every case (one predicate never answers against another)."""
    for value, *_ in CASES:
        assert not is_whole(value) or is_finite_real(value)
        assert not is_finite_real(value) or is_real(value)


def test_the_module_is_a_leaf() -> None:
    """It imports nothing from chillfl, lazily or not: every layer may use it without an import going up."""
    tree = ast.parse((SRC / "numeric.py").read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append("." * node.level + (node.module or ""))
    assert "math" in names  # the scan sees the module's imports
    assert not [n for n in names if n == "chillfl" or n.startswith(("chillfl.", "."))], names


COPIES = [
    re.compile(r"isinstance\((\w[\w.]*), \(int, float\)\) and not isinstance\(\1, bool\)"),
    re.compile(r"isinstance\((\w[\w.]*), bool\) or not isinstance\(\1, \(int, float\)\)"),
    re.compile(r"isinstance\((\w[\w.]*), int\) and not isinstance\(\1, bool\)"),
    re.compile(r"isinstance\((\w[\w.]*), bool\) or not isinstance\(\1, int\)"),
]


def test_no_copy_of_the_predicate_is_left() -> None:
    """The spellings the module replaced appear nowhere else in the package: a new check calls the predicate."""
    found = [
        f"{path.relative_to(SRC)}:{i}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "numeric.py"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if any(p.search(line) for p in COPIES)
    ]
    assert not found, "\n".join(found)


def test_the_copy_finder_finds_a_copy() -> None:
    """The scan itself: each spelling it looks for is matched (a pattern that matches nothing would pass any tree)."""
    lines = [
        "ok = isinstance(v, (int, float)) and not isinstance(v, bool)",
        "if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:",
        "all(isinstance(s, int) and not isinstance(s, bool) for s in value)",
        "if isinstance(projection_dim, bool) or not isinstance(projection_dim, int) or not 0 <= projection_dim:",
    ]
    assert [any(p.search(line) for p in COPIES) for line in lines] == [True] * 4
    assert not any(p.search("isinstance(a, int) and not isinstance(b, bool)") for p in COPIES)  # two names: not the predicate

"""docs/extending.md's reference bullets name every field of the spec types a plugin author fills in.

Why: a field missing from the page (``AlgorithmSpec.tolerates`` was, for a session) is a capability a plugin author
cannot find without reading the source. The check reads the dataclasses' own fields, so a field added later fails
here until the page names it.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from chillfl.aggregation.registry import AlgorithmSpec, BuildContext
from chillfl.capabilities import Capabilities
from chillfl.plots.registry import FigureSpec

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


def reference_bullet(name: str) -> str:
    """The text of the reference bullet that starts with ``* `Name(``, up to the next bullet, heading or the page's end."""
    text = DOC.read_text(encoding="utf-8")
    m = re.search(rf"^\* `{name}\(.*?(?=^\* |^#|\Z)", text, flags=re.S | re.M)
    assert m is not None, f"docs/extending.md has no reference bullet for {name}"
    return m.group(0)


@pytest.mark.parametrize("cls", [AlgorithmSpec, BuildContext, Capabilities, FigureSpec], ids=lambda c: c.__name__)
def test_reference_bullet_names_every_field(cls: type) -> None:
    # BuildContext has no bullet of its own: it is described inside AlgorithmSpec's
    bullet = reference_bullet("AlgorithmSpec" if cls is BuildContext else cls.__name__)
    missing = [f.name for f in dataclasses.fields(cls) if not re.search(rf"\b{f.name}\b", bullet)]
    assert missing == [], f"docs/extending.md's {cls.__name__} reference leaves out {missing}"

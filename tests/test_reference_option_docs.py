"""`chillfl list --options` lists each option's attribute docstring under its table: ``[client]``'s ``batch_size = 1``
caveat, and every other note written beside an option, were in the source alone."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

from chillfl.report.reference import attribute_docs, options_table


def test_the_client_table_lists_batch_size_notes() -> None:
    out = subprocess.run([sys.executable, "-m", "chillfl", "list", "--options", "client"], capture_output=True, text=True, check=True).stdout
    listed = " ".join(out.split("| `sam_eta` |")[1].split())  # the list under the table, its wrapped lines joined
    assert "- `batch_size`: Rows per local step." in listed and "so `batch_size = 1` is not per-sample SGD" in listed
    assert "`chillfl.training.local.batch_order`" in listed and ":func:" not in listed  # reST as markdown


@dataclasses.dataclass
class Base:
    a: int = 1
    """The base's a.

    Its second paragraph is left out."""
    b: int = 2
    """The base's b."""


@dataclasses.dataclass
class Child(Base):
    b: int = 3
    """The child's b, over ``Base``'s."""
    c: int = 4


def test_a_subclass_keeps_its_bases_docs_and_replaces_its_own() -> None:
    assert attribute_docs(Child) == {"a": "The base's a.", "b": "The child's b, over `Base`'s."}
    rows = options_table(Child, "plugin")
    assert rows[-3:] == ["", "- `a`: The base's a.", "- `b`: The child's b, over `Base`'s."]


def test_a_class_without_source_lists_its_table_alone() -> None:
    space: dict[str, object] = {}
    exec("import dataclasses\n@dataclasses.dataclass\nclass Made:\n    x: int = 1\n    'x'\n", space)
    made = space["Made"]
    assert isinstance(made, type)
    assert attribute_docs(made) == {}
    assert options_table(made, "plugin")[-1] == "| `x` | `int` | `1` |  |"

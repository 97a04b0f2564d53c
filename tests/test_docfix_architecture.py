"""docs/architecture.md's layout table names, per package, exactly the chillfl packages and modules it imports.

The page says its third column *is* the import graph of ``tests/test_import_cycles.py`` (shared leaves left out). Written
by hand it went stale in 7 of 11 packages; this test reads the column back and compares it with the graph, so a new
import (or a removed one) fails here until the row says it too.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from test_import_cycles import Edge, import_graph, package_of

DOC = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"
LEAVES = frozenset({"errors", "numeric", "options", "paths", "once", "wording"})
"""The shared leaves the page says it leaves out."""
HEADER = "| package | concern | imports from chillfl |"
NONE = "the shared leaves only"
"""What a row says when the package imports nothing but the shared leaves."""


def names(text: str) -> set[str]:
    """The names of one column entry: comma-separated, each optionally followed by a ``(note)``."""
    text = re.sub(r"\s*\([^()]*\)", "", text).strip()
    if text == NONE:
        return set()
    out = {part.strip() for part in text.split(",")}
    bad = sorted(n for n in out if not n.isidentifier())
    assert not bad, f"not a module name in the layout table: {bad} (write 'name (note)', comma-separated)"
    return out


def documented(doc: str) -> dict[str, set[str]]:
    """Package -> the names its row lists; a row of several packages writes ``pkg: a, b; pkg2: c``."""
    lines = doc.splitlines()
    start = lines.index(HEADER) + 2
    out: dict[str, set[str]] = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        first, _concern, imports = (cell.strip() for cell in line.strip("|").split("|"))
        packages = re.findall(r"`(\w+)/`", first)
        if len(packages) == 1:
            out[packages[0]] = names(imports)
            continue
        for part in imports.split(";"):
            package, _, rest = part.partition(":")
            out[package.strip()] = names(rest)
        assert set(packages) <= set(out), f"a row of {packages} without a 'pkg: ...' part for each"
    return out


def imported(package: str, graph: dict[str, list[Edge]]) -> set[str]:
    """What ``chillfl.<package>`` imports from the rest of chillfl (lazy imports too), shared leaves left out."""
    full = f"chillfl.{package}"
    targets = {package_of(e.target).removeprefix("chillfl.") for module, edges in graph.items() if module == full or module.startswith(full + ".") for e in edges}
    return targets - {package} - LEAVES


def test_names_reads_notes_and_the_empty_row() -> None:
    assert names("report (its tables), executors (worker pools), storage") == {"report", "executors", "storage"}
    assert names("the shared leaves only") == set()


def test_layout_table_matches_the_import_graph() -> None:
    rows = documented(DOC.read_text(encoding="utf-8"))
    assert len(rows) >= 11, sorted(rows)
    graph = import_graph()
    actual = {package: imported(package, graph) for package in rows}
    wrong = {package: (f"missing {sorted(actual[package] - listed)}", f"not imported {sorted(listed - actual[package])}") for package, listed in rows.items() if listed != actual[package]}
    assert not wrong, f"docs/architecture.md's layout table disagrees with the imports: {wrong}"


def test_spec_field_lists_match_the_dataclasses() -> None:
    """The "one home per method" table writes each spec as ``XSpec(field, ...)``: every field, in order (PolicySpec's
    ``check`` was missing)."""
    from chillfl.extend import AlgorithmSpec, AttackSpec, MechanismSpec, PolicySpec, PrototypeSpec, SoftLabelSpec

    classes: dict[str, type] = {c.__name__: c for c in (AlgorithmSpec, SoftLabelSpec, PrototypeSpec, PolicySpec, AttackSpec, MechanismSpec)}
    listed = {name: [f.strip() for f in fields.split(",")] for name, fields in re.findall(r"`(\w+Spec)\(([^)]*)\)`", DOC.read_text(encoding="utf-8"))}
    assert set(listed) == set(classes), sorted(set(listed) ^ set(classes))
    wrong = {name: [f.name for f in dataclasses.fields(classes[name])] for name in listed if listed[name] != [f.name for f in dataclasses.fields(classes[name])]}
    assert not wrong, f"docs/architecture.md's spec table: the real fields are {wrong}"

"""The package's import graph has no cycle, between modules or between packages, and the engine stays below the layers that use it.

Every ``import`` statement counts, wherever it is: at module level, inside a
function (a lazy import defers a dependency, it does not remove it) or under
``if TYPE_CHECKING``. A cycle hidden behind lazy imports still means the two
modules cannot be understood, tested or moved apart, and one refactor away
from an ``ImportError: partially initialized module``.

Two graphs are checked. Between modules: no module imports itself back.
Between packages: each subpackage (``chillfl.engine``, ``chillfl.protocols``,
...) is one node and each top-level module (``chillfl.config``,
``chillfl.runner``) its own node; an import of any module of one node by any
module of another is an edge. Packages form a DAG: the layers can be read,
tested and moved bottom-up, and a module-level DAG that only holds because two
packages take turns importing each other's modules does not pass.

Resolution: ``import chillfl.a.b`` -> ``chillfl.a.b``; ``from chillfl.a import
x`` -> ``chillfl.a.x`` when that is a module, else ``chillfl.a`` (a package's
``__init__`` is the module ``chillfl.a``); relative imports are resolved
against the importing module's package. Importing a submodule does not add an
edge to its parent package: that would make every package with an
``__init__`` that re-exports its submodules a cycle.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from collections.abc import Sequence
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "chillfl"

ENGINE = "chillfl.engine"
ABOVE_ENGINE = ("chillfl.executors", "chillfl.storage", "chillfl.report", "chillfl.sweeps", "chillfl.distillation", "chillfl.prototypes", "chillfl.runner", "chillfl.experiment", "chillfl.cli")
"""The engine runs rounds; these build, report on or drive it, so it must not import them."""


@dataclass(frozen=True)
class Edge:
    """One import statement: ``source`` imports ``target`` at ``file:line``."""

    source: str
    target: str
    file: str
    line: int
    text: str

    def where(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"


def module_files() -> dict[str, Path]:
    """Module name -> file, for every module of the package (``__init__.py`` -> the package's name)."""
    out = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` or its longest prefix that is a module of the package (None: outside it)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> list[Edge]:
    """Every import of a package module in ``path``, at any depth of the syntax tree."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = path.read_text(encoding="utf-8").splitlines()
    is_package = path.name == "__init__.py"
    rel = str(path.relative_to(SRC.parent))
    edges = []

    def add(target: str | None, node: ast.stmt) -> None:
        if target is not None and target != module:
            edges.append(Edge(module, target, rel, node.lineno, lines[node.lineno - 1].strip()))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == PACKAGE or alias.name.startswith(PACKAGE + "."):
                    add(_known(alias.name, modules), node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module if is_package else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{node.module}" if node.module else package
            else:
                base = node.module or ""
            if base != PACKAGE and not base.startswith(PACKAGE + "."):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in modules else _known(base, modules), node)
    return edges


def import_graph() -> dict[str, list[Edge]]:
    modules = module_files()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def find_cycles(graph: dict[str, list[Edge]]) -> list[list[Edge]]:
    """One cycle (its import statements, in order) per strongly connected component of more than one module.

    A shortest cycle through the component's first module, found by
    breadth-first search inside it.
    """
    return [_cycle_through(graph, set(c), c[0]) for c in components(graph)]


def components(graph: dict[str, list[Edge]]) -> list[list[str]]:
    """The strongly connected components of more than one node, each sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted({e.target for e in graph[root]})))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted({e.target for e in graph[child]}))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _cycle_through(graph: dict[str, list[Edge]], members: set[str], start: str) -> list[Edge]:
    """A shortest path start -> ... -> start inside ``members``, as the edges taken."""
    previous: dict[str, Edge] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for edge in graph[node]:
                if edge.target not in members:
                    continue
                if edge.target == start:
                    path = [edge]
                    while path[0].source != start:
                        path.insert(0, previous[path[0].source])
                    return path
                if edge.target not in previous:
                    previous[edge.target] = edge
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")  # pragma: no cover


def describe(cycle: list[Edge], graph: dict[str, list[Edge]]) -> str:
    """The cycle's path and import lines, then every other import inside its component (all must go to break it)."""
    members = {e.source for e in cycle}
    names = " -> ".join([cycle[0].source, *(e.target for e in cycle)])
    others = [e for m in sorted(members) for e in graph[m] if e.target in members and e not in cycle]
    text = names + "\n" + "\n".join(f"    {e.where()}" for e in cycle)
    if others:
        text += "\n  other imports inside the same component:\n" + "\n".join(f"    {e.where()}" for e in others)
    return text


def test_graph_sees_every_kind_of_import() -> None:
    """The scanner itself: lazy, relative and ``from pkg import module`` imports are all edges."""
    graph = import_graph()
    targets = {name: {e.target for e in edges} for name, edges in graph.items()}
    assert "chillfl.data.loaders" in targets["chillfl.data.datasets"]  # from chillfl.data import loaders
    assert "chillfl.distillation.comet" in targets["chillfl.distillation.methods.comet"]  # from chillfl.distillation.comet import ...
    assert "chillfl.executors.ray_executor" in targets["chillfl.experiment"]  # inside build_experiment
    assert "chillfl.errors" in targets["chillfl.config"]
    assert len(graph) > 50


def test_cycle_finder_reports_the_path() -> None:
    """On a made-up graph: a -> b -> c -> a is found with its import lines; the d -> a tail is not part of it."""

    def edge(a: str, b: str, line: int) -> Edge:
        return Edge(a, b, f"{a}.py", line, f"import {b}")

    graph = {"a": [edge("a", "b", 1)], "b": [edge("b", "c", 2)], "c": [edge("c", "a", 3)], "d": [edge("d", "a", 4)], "e": []}
    (cycle,) = find_cycles(graph)
    assert [(e.source, e.target) for e in cycle] == [("a", "b"), ("b", "c"), ("c", "a")]
    assert "a -> b -> c -> a" in describe(cycle, graph) and "c.py:3: import a" in describe(cycle, graph)
    assert find_cycles({"a": [edge("a", "b", 1)], "b": []}) == []


def package_of(module: str) -> str:
    """The node a module belongs to in the package graph: ``chillfl.X`` for a module of subpackage X (or X itself), else the module."""
    parts = module.split(".")
    return ".".join(parts[:2])


def package_graph(graph: dict[str, list[Edge]]) -> dict[str, list[Edge]]:
    """``graph`` with each module replaced by its package (:func:`package_of`); imports inside one package are dropped."""
    out: dict[str, list[Edge]] = {package_of(m): [] for m in graph}
    seen: set[tuple[str, str, str, int]] = set()
    for edges in graph.values():
        for e in edges:
            source, target = package_of(e.source), package_of(e.target)
            if source != target and (source, target, e.file, e.line) not in seen:
                seen.add((source, target, e.file, e.line))
                out[source].append(Edge(source, target, e.file, e.line, e.text))
    return out


def test_package_graph_collapses_modules() -> None:
    """a.x -> b.y and b.z -> a.w: no cycle between modules, one between packages a and b; imports inside a package vanish."""

    def edge(a: str, b: str, line: int) -> Edge:
        return Edge(a, b, f"{a}.py", line, f"import {b}")

    graph = {
        "p.a.x": [edge("p.a.x", "p.b.y", 1), edge("p.a.x", "p.a.w", 2)],
        "p.b.y": [],
        "p.b.z": [edge("p.b.z", "p.a.w", 3)],
        "p.a.w": [edge("p.a.w", "p.c", 4)],
        "p.c": [],
    }
    assert find_cycles(graph) == []
    packages = package_graph(graph)
    assert {n: [(e.source, e.target) for e in es] for n, es in packages.items()} == {"p.a": [("p.a", "p.b"), ("p.a", "p.c")], "p.b": [("p.b", "p.a")], "p.c": []}
    (cycle,) = find_cycles(packages)
    assert "p.a -> p.b -> p.a" in describe(cycle, packages) and "p.b.z.py:3: import p.a.w" in describe(cycle, packages)
    real = package_graph(import_graph())
    assert {"chillfl.engine", "chillfl.config", "chillfl.runner", "chillfl.protocols"} <= set(real)
    assert "chillfl.engine.loop" not in real
    assert "chillfl.executors.ray_executor" in {e.target for e in import_graph()["chillfl.experiment"]}  # a lazy import...
    assert "chillfl.engine" in {e.target for e in real["chillfl.experiment"]}  # ...is an edge between packages too


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycles = find_cycles(graph)
    if cycles:
        pytest.fail(
            f"{len(cycles)} import cycle(s) in {PACKAGE} (every import counts, lazy ones too):\n" + "\n".join(describe(c, graph) for c in cycles),
            pytrace=False,
        )


def test_packages_form_a_dag() -> None:
    """No cycle between packages (:func:`package_graph`), lazy imports included: each line printed is one import to move."""
    graph = package_graph(import_graph())
    found = components(graph)
    if found:
        pytest.fail(
            f"{len(found)} import cycle(s) between the packages of {PACKAGE} (every import counts, lazy ones too):\n"
            + "\n".join(f"[{', '.join(c)}]: " + describe(_cycle_through(graph, set(c), c[0]), graph) for c in found),
            pytrace=False,
        )


@pytest.mark.parametrize("forbidden", ABOVE_ENGINE)
def test_engine_does_not_import_the_layers_above_it(forbidden: str) -> None:
    graph = import_graph()
    bad = [
        e
        for name, edges in graph.items()
        if name == ENGINE or name.startswith(ENGINE + ".")
        for e in edges
        if e.target == forbidden or e.target.startswith(forbidden + ".")
    ]
    assert not bad, f"{ENGINE} must not import {forbidden}:\n" + "\n".join(f"    {e.where()}" for e in bad)


BUILDING_BLOCKS = (
    "_torch", "_version", "aggregation", "config", "data", "distillation", "engine", "environment", "errors", "experiments", "extras", "metrics", "models", "numeric", "options",
    "paths", "plots", "plugins", "progress", "protocols", "prototypes", "seeds", "settings", "temperature", "training", "tune", "extend",
)
"""Packages and modules the runs are built from: they hold maths, messages, the loop and the protocols (and the figures drawn from their records)."""
DRIVERS = ("__main__", "analysis", "analysis_cli", "catalogue", "api", "cli", "docs_outputs", "experiment", "flower", "report", "reproduce", "runner", "sinks", "sweeps")
"""What builds, drives, reports on or analyses runs: the building blocks never import them (any import counts, lazy ones too)."""


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_building_blocks_do_not_import_the_layers_that_drive_them() -> None:
    graph = import_graph()
    assert not set(BUILDING_BLOCKS) & set(DRIVERS)
    tops = {_top(m) for m in graph} - {""}
    assert set(BUILDING_BLOCKS) <= tops, f"no such module: {sorted(set(BUILDING_BLOCKS) - tops)}"  # a module listed in neither is not checked
    bad = [e for name, edges in graph.items() if _top(name) in BUILDING_BLOCKS for e in edges if _top(e.target) in DRIVERS]
    assert not bad, "building blocks importing the layers above them:\n" + "\n".join(f"    {e.where()}" for e in bad)


REPORT = "chillfl.report"
RUNS = ("chillfl.sweeps", "chillfl.executors")
"""What plans and runs sweeps, and what runs clients: the report renders what they ran and imports neither (one direction:
:mod:`chillfl.sweeps` renders its tables with :mod:`chillfl.report`)."""


def imports_into(graph: dict[str, list[Edge]], package: str, forbidden: Sequence[str]) -> list[Edge]:
    """The imports, at any depth, by a module of ``package`` of a module of one of the ``forbidden`` packages."""
    return [
        e
        for name, edges in graph.items()
        if name == package or name.startswith(package + ".")
        for e in edges
        if any(e.target == f or e.target.startswith(f + ".") for f in forbidden)
    ]


def test_imports_into_finds_a_lazy_import() -> None:
    """On a made-up graph: a function-level import of a forbidden package's module is found; a lookalike name is not."""
    lazy, lookalike = Edge("p.report.a", "p.sweeps.run", "a.py", 9, "from p.sweeps.run import x"), Edge("p.report.b", "p.sweepsx", "b.py", 1, "import p.sweepsx")
    graph = {"p.report.a": [lazy], "p.report.b": [lookalike], "p.sweeps.run": [Edge("p.sweeps.run", "p.report.a", "run.py", 1, "import p.report.a")]}
    assert imports_into(graph, "p.report", ("p.sweeps",)) == [lazy]
    assert imports_into(graph, "p.sweeps", ("p.report",)) == graph["p.sweeps.run"]


def test_the_report_only_reports() -> None:
    """``chillfl.report`` imports nothing that plans or runs sweeps; the sweeps render with it."""
    graph = import_graph()
    assert {"chillfl.sweeps.plan", "chillfl.sweeps.run"} <= set(graph)
    assert "chillfl.report.compare" in {e.target for e in graph["chillfl.sweeps.run"]}  # the direction the layers go
    bad = imports_into(graph, REPORT, RUNS)
    assert not bad, f"{REPORT} must not import {' or '.join(RUNS)}:\n" + "\n".join(f"    {e.where()}" for e in bad)

"""Core code names no method: it asks a method's declared capabilities instead (issue: one home per method).

The round seam (``engine/``), the protocols, the Flower apps and the run builders
(``experiment.py``, ``runner.py``, ``catalogue.py``) must work for a plugin exactly as for a
built-in, so none of them may test a method's name or use a method's class. Checked on the
source's syntax tree: every identifier (names, attributes, imports, definitions) and every string
literal other than a docstring is split into words (``snake_case``, ``CamelCase``, ``VRL-SGD``),
and no run of consecutive words may spell a registered method's name (``check_krum``,
``FedMDOptions``, ``"vrl_sgd"`` and ``"VRL-SGD's ..."`` all do). Comments and docstrings may
mention methods as examples; code may not.

The method names come from the registries themselves, so a new built-in is covered with no edit here.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Iterator

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "chillfl"
CORE = ["experiment.py", "catalogue.py", "runner.py", "flower", "engine", "protocols", "executors", "storage", "training/local.py",
        "aggregation/registry.py", "attacks/build.py"]
"""Left out: ``aggregation/base.py``, which defines ``FedAvg`` (the base every rule may subclass), and ``privacy/build.py``,
whose refusals name example rules to the user ("FedAvg, median, Krum, ...")."""

GENERIC = {"none", "fixed", "median", "individual", "moon", "comet", "apple"}
"""Registered names that are also plain words ("the median", "individual", a "fixed" T, ``eval.clients = "none"``, "Apple's Metal"):
checked as identifiers only where one stands alone as a whole name (a class ``Median``), never in a string."""


def method_names() -> set[str]:
    """Every registered method of every family, normalised (lower case, no separators)."""
    from registry_cases import registry_cases

    names: set[str] = set()
    for _, overrides in registry_cases():
        for key in ("algorithm.name", "distillation.method", "prototypes.method", "temperature.policy"):
            if key in overrides:
                names.add(normalise(str(overrides[key])))
    return names


def normalise(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def words(text: str) -> list[str]:
    """``FedMDOptions`` -> fed, md, options; ``check_krum`` -> check, krum; ``VRL-SGD's`` -> vrl, sgd, s."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    spaced = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", spaced)
    return [w.lower() for w in re.split(r"[^A-Za-z0-9]+", spaced) if w]


def spells(tokens: list[str], names: set[str]) -> str | None:
    """The method name some run of consecutive words spells, if any."""
    for i in range(len(tokens)):
        joined = ""
        for tok in tokens[i:i + 4]:
            joined += tok
            if joined in names:
                return joined
    return None


def core_files() -> Iterator[Path]:
    for entry in CORE:
        path = SRC / entry
        yield from sorted(path.rglob("*.py")) if path.is_dir() else [path]


def docstring_nodes(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
        else:
            continue
        for stmt in body:  # a bare string statement anywhere in a body documents, it does not run
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                out.add(id(stmt.value))
    return out


def findings(path: Path, names: set[str]) -> Iterator[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = docstring_nodes(tree)
    where = path.relative_to(SRC.parent) if path.is_relative_to(SRC.parent) else path
    strict = names - GENERIC
    for node in ast.walk(tree):
        idents: list[str] = []
        if isinstance(node, ast.Name):
            idents = [node.id]
        elif isinstance(node, ast.Attribute):
            idents = [node.attr]
        elif isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            idents = [node.name]
        elif isinstance(node, ast.alias):
            idents = [node.name.rpartition(".")[2], *(node.asname and [node.asname] or [])]
        elif isinstance(node, ast.ImportFrom) and node.module:
            idents = node.module.split(".")
        elif isinstance(node, ast.arg):
            idents = [node.arg]
        for ident in idents:
            hit = spells(words(ident), strict) or (normalise(ident) if normalise(ident) in names else None)
            if hit:
                yield f"{where}:{getattr(node, 'lineno', '?')}: {ident!r} names {hit!r}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            whole = normalise(node.value)
            hit = spells(words(node.value), strict) or (whole if whole in strict else None)
            if hit:
                yield f"{where}:{node.lineno}: string {node.value[:60]!r} names {hit!r}"


def test_the_registries_give_names_to_look_for() -> None:
    names = method_names()
    assert {"fedavg", "krum", "vrlsgd", "pa3fed", "scarlet", "fedmd", "fedhkd", "fedproto", "fedchill"} <= names


@pytest.mark.parametrize("path", list(core_files()), ids=lambda p: str(p.relative_to(SRC)))
def test_core_code_names_no_method(path: Path) -> None:
    found = list(findings(path, method_names()))
    assert not found, "core code names methods (declare a capability instead):\n" + "\n".join(found)


def test_the_check_finds_what_it_should(tmp_path: Path) -> None:
    """The checker's own cases: each line below names a method, the last two do not."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Docstrings may say FedMD and Krum."""\n'
        "from chillfl.aggregation.robust import Krum\n"
        "def check_krum(x): return isinstance(x, Krum)\n"
        "PLAIN = {'vrl_sgd': 1}\n"
        "msg = f\"VRL-SGD's Delta_i needs {1}\"\n"
        "class FedMDOptions: pass\n"
        "if method == 'fedhkd': pass\n"
        "x = 'the median of the rows'  # a plain word in a message\n"
        "y = chillfl_capabilities.plain_sgd\n",
        encoding="utf-8",
    )
    found = list(findings(sample, {"krum", "vrlsgd", "fedmd", "fedhkd", "median"}))
    lines = sorted({int(f.removeprefix(str(sample)).split(":")[1]) for f in found})
    assert lines == [2, 3, 4, 5, 6, 7], found

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
import sys
from pathlib import Path
from typing import Iterator

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "chillfl"
CORE = ["experiment.py", "catalogue.py", "runner.py", "flower", "engine", "protocols", "executors", "storage", "training",
        "aggregation/registry.py", "attacks/build.py", "report", "sweeps", "config.py", "cli.py", "api.py", "seeds.py"]
"""Left out: ``aggregation/base.py``, which defines ``FedAvg`` (the base every rule may subclass), and ``privacy/build.py``,
whose refusals name example rules to the user ("FedAvg, median, Krum, ...")."""

METHOD_HOMES = ["training/fedgen.py", "training/fedalign.py", "training/moon.py", "training/term_kinds"]
"""Under a :data:`CORE` folder but a method's own home (its loss terms), which names the method by right."""

ALLOWED: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    ("seeds.py", "PREFIX_KEYED"): (
        frozenset({"fedala", "fedcp", "fedfomo", "fedtgp", "fesem", "fml", "ifca", "perfedavg", "pfedme"}),
        "a frozen compatibility table: the streams these methods drew before seeds were keyed by purpose, kept so that "
        "the docs' recorded outputs stay bit-identical; regenerating those outputs would let it go, not a new entry"),
    ("config.py", "RunConfig.algorithm"): (frozenset({"fedavg"}), "the default method of a config that names none"),
    ("api.py", "_record_plugged"): (frozenset({"fedavg"}), "the same default, which a record of a part passed from Python replaces"),
}
"""Named exceptions: (file under src/chillfl, the definition holding the code: ``Class.method``, a function, or the name
assigned) -> (the method names it may spell there, why). A new name in the same place, or the same name anywhere else,
is still found."""

PROSE: dict[tuple[str, str], tuple[frozenset[str], str]] = {
    ("api.py", "as_plugged"): (frozenset({"fedavg"}), "the refusal's example: chillfl.extend.FedAvg() for FedAvg"),
    ("api.py", "FinishedRun.evaluate"): (frozenset({"fedcp", "feddbe"}), "the refusal's examples of clients that keep another architecture"),
    ("cli.py", "build_parser"): (frozenset({"fedchill", "pa3fed", "scarlet", "ditto"}),
                                 "the program's description (the papers it is built around) and a help example"),
    ("cli.py", "build_parser.common"): (frozenset({"perfedavg", "fedavg"}), "a help example of a variant's label ('Per-FedAvg (FO)')"),
    ("cli.py", "cmd_run"): (frozenset({"fedavg"}), "the demo's banner: what the demo runs"),
    ("cli.py", "_calibrated"): (frozenset({"fedavg"}), "what the calibration times: the demo's setting"),
    ("training/objective.py", "PROXIMAL"): (frozenset({"fedprox"}), "the proximal term's summary names the paper it comes from"),
}
"""As :data:`ALLOWED`, for words in a sentence only (a string with a space: a message, a help text), never for a string
that is a name by itself (the ``reproduce`` parser's choices spelled ``"pa3fed"`` beside its description's PA3Fed)."""

GENERIC = {"none", "fixed", "median", "individual", "moon", "comet", "apple"}
"""Registered names that are also plain words ("the median", "individual", a "fixed" T, ``eval.clients = "none"``, "Apple's Metal"):
checked as identifiers only where one stands alone as a whole name and is not a lower-case word (a class ``Median``,
``MOON``; a function ``fixed`` or ``np.median`` is the word), or is imported, never in a string."""


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
    return next(iter(spelled(tokens, names)), None)


def spelled(tokens: list[str], names: set[str]) -> list[str]:
    """Every method name a run of consecutive words spells, in the order they start."""
    out = []
    for i in range(len(tokens)):
        joined = ""
        for tok in tokens[i:i + 4]:
            joined += tok
            if joined in names:
                out.append(joined)
    return out


def core_files() -> Iterator[Path]:
    homes = [SRC / home for home in METHOD_HOMES]
    for entry in CORE:
        path = SRC / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            if not any(file == home or home in file.parents for home in homes):
                yield file


def owners(tree: ast.AST) -> dict[int, str]:
    """id(node) -> the definition holding it, as :data:`ALLOWED` names one: ``Class.method``, ``function``, or the name a
    module- or class-level assignment assigns (``PREFIX_KEYED``, ``RunConfig.algorithm``); "" at module level."""
    out: dict[int, str] = {}

    def visit(node: ast.AST, owner: str, in_def: bool) -> None:
        out[id(node)] = owner
        for child in ast.iter_child_nodes(node):
            inner, deeper = owner, in_def
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = f"{owner}.{child.name}" if owner else child.name
                deeper = in_def or not isinstance(child, ast.ClassDef)
            elif not in_def and isinstance(child, (ast.Assign, ast.AnnAssign)):
                targets = child.targets if isinstance(child, ast.Assign) else [child.target]
                named = [t.id for t in targets if isinstance(t, ast.Name)]
                if len(named) == 1:
                    inner = f"{owner}.{named[0]}" if owner else named[0]
            visit(child, inner, deeper)

    visit(tree, "", False)
    return out


def allowed_here(path: Path, owner: str, prose: bool) -> frozenset[str]:
    """The method names :data:`ALLOWED` (and, in a sentence, :data:`PROSE`) let ``owner``'s code in ``path`` spell."""
    if not path.is_relative_to(SRC):
        return frozenset()
    key = (path.relative_to(SRC).as_posix(), owner)
    return ALLOWED.get(key, (frozenset(), ""))[0] | (PROSE.get(key, (frozenset(), ""))[0] if prose else frozenset())


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
    """Each place ``path``'s code names one of ``names``, less what :data:`ALLOWED` lets its definition name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = docstring_nodes(tree)
    owner = owners(tree)
    where = path.relative_to(SRC.parent) if path.is_relative_to(SRC.parent) else path
    strict = names - GENERIC
    for node in ast.walk(tree):
        sentence = isinstance(node, ast.Constant) and isinstance(node.value, str) and " " in node.value.strip()
        allowed = allowed_here(path, owner.get(id(node), ""), sentence)
        idents: list[str] = []
        imported = isinstance(node, (ast.alias, ast.ImportFrom))
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
            whole = normalise(ident)
            generic_word = whole in GENERIC and ident.islower() and not imported
            hits = [*spelled(words(ident), strict), *([whole] if whole in names and not generic_word else [])]
            hit = next((h for h in hits if h not in allowed), None)
            if hit:
                yield f"{where}:{getattr(node, 'lineno', '?')}: {ident!r} names {hit!r}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            whole = normalise(node.value)
            hits = [*spelled(words(node.value), strict), *([whole] if whole in strict else [])]
            hit = next((h for h in hits if h not in allowed), None)
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


def spelled_by(path: Path, owner: str, names: set[str]) -> set[str]:
    """Every method name the strings and identifiers of ``owner``'s code in ``path`` spell (docstrings left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs, held = docstring_nodes(tree), owners(tree)
    out: set[str] = set()
    for node in ast.walk(tree):
        if held.get(id(node)) != owner:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out |= set(spelled(words(node.value), names))
        elif isinstance(node, ast.Name):
            out |= set(spelled(words(node.id), names))
    return out


@pytest.mark.parametrize("entry", [*ALLOWED, *PROSE], ids=lambda e: f"{e[0]}:{e[1]}")
def test_every_allowed_name_is_still_there(entry: tuple[str, str]) -> None:
    """An exception outlives nothing: a renamed definition, or a name no longer spelled there, is taken off the list."""
    path, owner = SRC / entry[0], entry[1]
    names, why = ALLOWED.get(entry) or PROSE[entry]
    assert why and path.is_file(), entry
    assert owner in set(owners(ast.parse(path.read_text(encoding="utf-8"))).values()), f"{entry}: no such definition"
    assert sorted(names - spelled_by(path, owner, method_names())) == [], f"{entry}: allowed names no longer spelled there"


def test_an_allowed_name_is_allowed_only_where_it_is_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``PREFIX_KEYED`` may spell its methods; the same string elsewhere in seeds.py, or another method in the table, is found."""
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    sample = tmp_path / "seeds.py"
    sample.write_text("PREFIX_KEYED = frozenset({'fedala', 'krum'})\nOTHER = 'fedala'\ndef f(): return 'fedala'\n", encoding="utf-8")
    found = list(findings(sample, {"fedala", "krum"}))
    by_line = {int(f.split(":")[1]): f for f in found}
    assert sorted(by_line) == [1, 2, 3] and by_line[1].endswith("names 'krum'"), found
    prose = tmp_path / "cli.py"  # a sentence may name the papers; the same names as values may not
    prose.write_text("def build_parser():\n    d = 'logit chilling, FedChill, PA3Fed'\n    c = ('fedchill', 'pa3fed')\n", encoding="utf-8")
    assert sorted({int(f.split(":")[1]) for f in findings(prose, {"fedchill", "pa3fed"})}) == [3]


def test_a_generic_name_is_a_plain_word_in_lower_case(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def fixed(v): return v\n"  # a function named by the word: not the 'fixed' policy
        "none = [x for x in ()]\n"
        "m = np.median([1])\n"
        "class Median: pass\n"  # a class by the method's name
        "from chillfl.temperature.fixed import X\n"  # the method's module
        "z = MOON()\n",
        encoding="utf-8",
    )
    found = list(findings(sample, {"fixed", "none", "median", "moon"}))
    assert sorted({int(f.removeprefix(str(sample)).split(":")[1]) for f in found}) == [4, 5, 6], found

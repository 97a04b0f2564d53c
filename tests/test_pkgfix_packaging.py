"""Packaging (task pkgfix): the licence as setuptools >= 77 reads it without a deprecation warning, a ``dev`` extra that
runs the tests, and a source distribution that holds what the tests read beside the package."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from chillfl.config import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_the_licence_is_an_spdx_expression_that_the_build_backend_reads() -> None:
    """``license = { text = ... }`` is deprecated (setuptools warns it stops building after 2027-02-18); the string form
    and ``license-files`` need setuptools >= 77, and an unbounded old floor let an isolated build take any."""
    data = _pyproject()
    assert data["project"]["license"] == "Apache-2.0" and data["project"]["license-files"] == ["LICENSE"]
    requires = data["build-system"]["requires"]
    floors = [int(m.group(1)) for r in requires if (m := re.fullmatch(r"setuptools\s*>=\s*(\d+)(\.[\d.]+)?", r))]
    assert floors and floors[0] >= 77, requires
    assert "wheel" not in requires  # setuptools builds wheels itself (bdist_wheel moved into it in 70.1)


def _expanded(extras: dict[str, list[str]], name: str) -> set[str]:
    """An extra's requirements with its ``chillfl[...]`` references opened, recursively."""
    out: set[str] = set()
    for req in extras[name]:
        inner = re.fullmatch(r"chillfl\[([\w,-]+)\]", req)
        out |= set().union(*(_expanded(extras, e) for e in inner.group(1).split(","))) if inner else {req}
    return out


def test_the_dev_extra_holds_what_the_tests_import_and_cis_pinned_linters() -> None:
    """``dev`` lacked hypothesis (tests/test_hostile_input.py imports it), scikit-learn and matplotlib, and left ruff and
    mypy unpinned while CI lints with the test extra's pins."""
    extras = _pyproject()["project"]["optional-dependencies"]
    dev, test = _expanded(extras, "dev"), _expanded(extras, "test")
    assert test <= dev, sorted(test - dev)
    names = {re.split(r"[\[<>=!~;\s]", r, maxsplit=1)[0].lower() for r in dev}
    assert {"hypothesis", "pytest", "pytest-xdist", "scikit-learn", "matplotlib"} <= names
    assert {"ruff==0.17.6", "mypy==2.4.1"} <= dev


def test_the_sdist_holds_the_tests_helpers_and_what_they_read() -> None:
    """The sdist shipped tests/test_*.py only (setuptools' default): no conftest.py, helpers, slow_tests.txt,
    private_net/, docs/ or CITATION.cff, so its tests could not run. MANIFEST.in, as setuptools reads it (caches left out)."""
    egg_info = pytest.importorskip("setuptools.command.egg_info", reason="setuptools reads MANIFEST.in")
    folders = ("tests", "docs", "benchmarks", "scripts")
    present: list[str] = []
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(ROOT / folder):
            dirnames[:] = [d for d in dirnames if d not in ("__pycache__", ".pytest_cache", ".hypothesis", "results") and not d.startswith(".venv")]
            present += [(Path(dirpath) / f).relative_to(ROOT).as_posix() for f in filenames if not f.endswith(".pyc")]
    caches = ["tests/__pycache__/conftest.cpython-311.pyc", "tests/private_net/__pycache__/test_ray.cpython-311.pyc", "tests/.hypothesis/examples/x",
              "docs/.pytest_cache/v/x", "benchmarks/results/run.json", "benchmarks/.venv-peers/lib/x.py"]
    top = ["CITATION.cff", "mkdocs.yml", "LICENSE", "pyproject.toml", "README.md"]
    files = egg_info.FileList()
    files.set_allfiles(present + caches + top)
    for line in (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            files.process_template_line(line)
    shipped = set(files.files)
    assert set(present) <= shipped, sorted(set(present) - shipped)[:10]
    assert {"tests/conftest.py", "tests/slow_tests.txt", "tests/received_folder.py", "docs/install.md", "CITATION.cff"} <= shipped
    assert any(f.startswith("tests/private_net/") for f in shipped)
    assert not shipped & set(caches), sorted(shipped & set(caches))


def test_tomllib_is_imported_only_where_python_3_10_has_tomli_instead() -> None:
    """pyproject allows Python 3.10, which has no tomllib: every import of it sits under a version check or a try (a plain
    `import tomllib` in sweeps/record.py broke every command there, 2026-12-07), and the tests import chillfl.config's."""
    root = Path(__file__).resolve().parents[1]
    bare = []
    for path in sorted([*(root / "src" / "chillfl").rglob("*.py"), *(root / "tests").rglob("*.py")]):
        lines = path.read_text(encoding="utf-8").splitlines()
        for i, line in enumerate(lines):
            if line.strip() == "import tomllib" and not (i and re.match(r"\s*(if sys\.version_info >= \(3, 11\):|try:)\s*$", lines[i - 1])):
                bare.append(f"{path.relative_to(root)}:{i + 1}")
    assert bare == []

"""Everything docs/extending.md and docs/personalised.md name for a plugin author is exported by ``chillfl.extend``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import chillfl.extend

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```", flags=re.S | re.M)


def _text(page: str) -> str:
    return (DOCS / page).read_text(encoding="utf-8")


def _imported(page: str) -> set[str]:
    """The names the page's python blocks import from ``chillfl.extend``."""
    names: set[str] = set()
    for block in FENCE.findall(_text(page)):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.ImportFrom) and node.module == "chillfl.extend":
                names |= {alias.name for alias in node.names}
    return names


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def _ticked(text: str) -> set[str]:
    """The identifiers a passage puts first in backticks: `Name`, `Name(...)`, `Name: ...`, `name(...)`."""
    return set(re.findall(r"`([A-Za-z_]\w*)(?=[`(:\s])", text))


@pytest.mark.parametrize("page", ["extending.md", "personalised.md"])
def test_every_name_a_page_imports_from_extend_is_exported(page: str) -> None:
    names = _imported(page) | set(re.findall(r"chillfl\.extend\.(\w+)", _text(page)))
    assert names, f"{page} imports nothing from chillfl.extend"
    assert sorted(names - set(chillfl.extend.__all__)) == []


def test_the_parts_table_and_the_reference_list_name_only_exported_types() -> None:
    text = _text("extending.md")
    table = [line.rsplit("|", 2)[-2] for line in _section(text, "## The parts").splitlines() if line.startswith("| ") and "---" not in line][1:]
    in_table = set(re.findall(r"`(\w+)`", " ".join(table)))
    reference = {re.match(r"\* `(\w+)", line).group(1) for line in _section(text, "## Reference").splitlines() if line.startswith("* `")}  # type: ignore[union-attr]
    assert {"BatchTerm", "StepView", "PolicySpec", "TemperatureHalf", "Capabilities", "TermSpec"} <= in_table | reference
    assert sorted((in_table | reference) - set(chillfl.extend.__all__)) == []
    named_in_reference = _ticked(_section(text, "## Reference")) & {n for n in _ticked(_section(text, "## Reference")) if n[0].isupper() or n.startswith(("register_", "read_"))}
    assert sorted(named_in_reference - set(chillfl.extend.__all__) - {"Mapping", "Tensor", "Callable", "Any", "Path", "RunConfig"}) == []


def test_the_personalising_seam_names_are_exported() -> None:
    section = _section(_text("personalised.md"), "### Writing your own")
    section = re.sub(r"^```.*?^```", "", section, flags=re.M | re.S)  # the example's code runs in test_docs_pages (its imports with it)
    spans = re.findall(r"`([^`]+)`", section)
    names = {n for span in spans for n in re.findall(r"\b([A-Z]\w*)", span)}
    assert {"Personalising", "HoldsPersonalModel", "LocalSpec", "Local", "Train", "Personal", "LocalProgram"} <= names
    assert sorted(names - set(chillfl.extend.__all__) - {"True"}) == []  # True: personal_model=True


def test_every_export_exists() -> None:
    assert [n for n in chillfl.extend.__all__ if not hasattr(chillfl.extend, n)] == []


def test_every_register_function_extending_md_names_is_exported() -> None:
    """Section 3 tells a plugin module it may call ``register_term`` and ``register_algorithm`` as it does
    ``register_policy``; ``from chillfl.extend import register_algorithm`` was an ImportError."""
    named = set(re.findall(r"`(register_\w+)", _text("extending.md")))
    assert "register_algorithm" in named
    assert sorted(named - set(chillfl.extend.__all__)) == []

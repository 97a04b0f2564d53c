"""The README as a front door: its quickstart TOML runs, and every relative link in the docs resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chillfl.cli import main

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _quickstart() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Quickstart"):]
    return section[section.index("```toml\n") + len("```toml\n"):section.index("\n```", section.index("```toml"))] + "\n"


def test_the_quickstart_toml_is_short_and_runs(tmp_path, capsys) -> None:
    toml = _quickstart()
    assert len(toml.splitlines()) <= 10
    path = tmp_path / "quickstart.toml"
    path.write_text(toml)
    assert main(["run", str(path), "-q", "federation.rounds=1", f"out_dir={tmp_path / 'results'}"]) == 0
    assert (tmp_path / "results" / "quickstart" / "metrics.jsonl").is_file()


def test_the_readme_stays_a_front_door() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    missing = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        path = target.split("#", 1)[0]
        if path and not (page.parent / path).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)}: links to missing files: {missing}"


def test_the_citation_file_agrees_with_the_package_and_the_readme() -> None:
    """CITATION.cff (what GitHub's "Cite this repository" reads): valid CFF 1.2.0 fields, and the version and
    licence of pyproject.toml, which the README's BibTeX entry repeats; a release that bumps one must bump all."""
    import yaml  # PyYAML: a requirement of the test extra's Ray

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    try:
        import tomllib
    except ImportError:  # Python 3.10: the tomli our pyproject requires there
        import tomli as tomllib  # type: ignore[no-redef]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software" and cff["message"] and cff["title"].startswith("chillfl")
    assert cff["authors"] and all(a.get("name") or a.get("family-names") for a in cff["authors"])
    assert str(cff["version"]) == project["version"] and cff["license"] == project["license"]["text"]
    for ref in cff["references"]:  # every paper cited, each with its authors as the paper gives them
        assert ref["title"] and ref["authors"] and all(a.get("name") or a.get("family-names") for a in ref["authors"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"version = {{{project['version']}}}" in readme and "CITATION.cff" in readme

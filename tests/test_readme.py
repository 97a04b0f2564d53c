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
    assert len(toml.splitlines()) <= 11  # 10, and [eval] validation: FedChill steers on validation rows, not test rows
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


def _anchors(page: Path) -> set[str]:
    """A page's heading anchors as GitHub and the site (mkdocs.yml's slugify) spell them, with explicit ids."""
    text = page.read_text(encoding="utf-8")
    found = set(re.findall(r'<a id="([^"]+)"', text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+?)\s*$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower().strip()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        found.add(slug if not seen[slug] else f"{slug}_{seen[slug]}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_land_on_an_anchor_that_exists(page: Path) -> None:
    """mkdocs --strict checks the anchors of docs/ only; README.md and benchmarks/README.md (outside the site) link too."""
    text = re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M))
    missing = []
    for target in LINK.findall(text):
        path, _, anchor = target.partition("#")
        if not anchor or target.startswith(("http://", "https://")):
            continue
        file = page.parent / path if path else page
        if file.suffix == ".md" and file.is_file() and anchor not in _anchors(file):
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)}: links to missing anchors: {missing}"


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
    assert str(cff["version"]) == project["version"] and cff["license"] == project["license"]
    for ref in cff["references"]:  # every paper cited, each with its authors as the paper gives them
        assert ref["title"] and ref["authors"] and all(a.get("name") or a.get("family-names") for a in ref["authors"])
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"version = {{{project['version']}}}" in readme and "CITATION.cff" in readme

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

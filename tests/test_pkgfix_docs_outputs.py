"""``python -m chillfl.docs_outputs`` from an installed chillfl (site-packages holds no README.md or docs/): with no
files named it found none and exited 0 having checked nothing, a silent pass; it says so in one line and exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl import docs_outputs


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This module as a non-editable install lays it out: ``<venv>/lib/python3.11/site-packages/chillfl/docs_outputs.py``."""
    package = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "chillfl"
    package.mkdir(parents=True)
    module = package / "docs_outputs.py"
    module.write_text("# installed\n", encoding="utf-8")
    monkeypatch.setattr(docs_outputs, "__file__", str(module))
    return package


@pytest.mark.parametrize("flags", [["--check"], ["--list"], []], ids=["check", "list", "rewrite"])
def test_an_installed_chillfl_with_no_files_named_says_so_and_exits_2(installed: Path, flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert docs_outputs.default_files() == []
    assert docs_outputs.main(flags) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == ["no README.md or docs/ beside this chillfl: name the files"]


def test_an_installed_chillfl_still_checks_the_files_named(installed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A page\n\nNo output blocks here.\n", encoding="utf-8")
    assert docs_outputs.main(["--list", str(page)]) == 0
    assert docs_outputs.main(["--check", str(page)]) == 0
    assert "no README.md or docs/" not in capsys.readouterr().err

"""The command line's first-contact answers: ``--version``, and a misspelt experiment name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import chillfl
from chillfl.cli import main

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_version_prints_the_package_version_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"chillfl {chillfl.__version__}\n"


def test_version_imports_no_torch() -> None:
    from test_cli_startup import _probe

    assert _probe(["--version"]) == ""


def test_the_version_is_the_one_pyproject_declares() -> None:
    """``chillfl._version`` (what ``--version`` and every result folder print) and the packaged version are one number."""
    declared = re.search(r'^version = "([^"]+)"$', PYPROJECT.read_text(encoding="utf-8"), re.MULTILINE)
    assert declared is not None and declared.group(1) == chillfl.__version__


@pytest.mark.parametrize(
    ("argv", "closest"),
    [
        (["run", "flexchill/table4-digit"], "flexchill/table4-digits"),
        (["run", "fedchill/table2-digits.tml"], "fedchill/table2-digits"),
        (["compare", "Demo"], "demo"),
        (["data", "show", "scarlet/dsfl-vs-scarlet-digit"], "scarlet/dsfl-vs-scarlet-digits"),
    ],
)
def test_a_misspelt_experiment_is_one_line_with_the_closest_name(argv: list[str], closest: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"chillfl: error: config: file not found: {argv[-1]!r} (did you mean {closest!r}?)")


def test_a_name_like_no_experiment_gets_no_guess(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "zzzz/qqqq"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["chillfl: error: config: file not found: 'zzzz/qqqq'; `chillfl list experiments` lists the bundled experiments"]

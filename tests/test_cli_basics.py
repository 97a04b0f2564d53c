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


def test_an_empty_config_file_says_it_runs_the_defaults(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty file (a wrong path written to, a save that failed) ran 30 rounds of the defaults without a word."""
    empty, comment, one = tmp_path / "empty.toml", tmp_path / "comment.toml", tmp_path / "one.toml"
    empty.write_text("")
    comment.write_text("# nothing yet\n")
    one.write_text("seed = 3\n")
    for path in (empty, comment):
        assert main(["run", str(path), "--dry-run"]) == 0
        assert capsys.readouterr().err.splitlines()[0] == f"chillfl: note: {path} sets nothing; the config is the defaults"
    assert main(["run", str(one), "--dry-run"]) == 0
    assert "sets nothing" not in capsys.readouterr().err
    # with overrides it said "running every default", which they contradict
    assert main(["run", str(empty), "client.lr=0.1", "--seed", "2", "--dry-run"]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        f"chillfl: note: {empty} sets nothing; the config is the defaults with the command line's settings")

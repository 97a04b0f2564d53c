"""A received run or comparison folder read as data: names with control characters escaped where they reach the terminal; `status .` names its run (F5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

from received_folder import copy_run, make_run

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("secfix"))


def test_status_escapes_a_folder_named_with_escape_sequences(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run(run_dir, tmp_path, "esc\x1b]0;PWN\x07\x1b[31mRED")
    assert main(["status", str(run)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "esc\\x1b]0;PWN\\x07\\x1b[31mRED" in out
    bad = tmp_path / "bad\x1b[31m"
    bad.mkdir()
    assert main(["status", str(run), str(bad)]) == 2
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err


def test_analyze_escapes_a_run_named_with_escape_sequences(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run(run_dir, tmp_path, "esc\x1b[31mRED")
    assert main(["analyze", "calibration", str(run), "-q", "-o", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "esc\\x1b[31mRED: accuracy" in out


def test_status_of_dot_names_the_run(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    run = copy_run(run_dir, tmp_path, "mine")
    monkeypatch.chdir(run)
    assert main(["status", "."]) == 0
    assert "| mine | finished |" in capsys.readouterr().out

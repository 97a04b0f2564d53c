"""The note on a config file that sets nothing is true however the command ends: it says no "running" (a bad
override stops the command right after it) and points to --dry-run only where --dry-run was not given."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main


def test_the_note_before_an_error_says_nothing_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert main(["run", str(empty), "rounds=3", "--out", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"chillfl: note: {empty} sets nothing; the config is the defaults with the command line's settings (--dry-run lists them)"
    assert err[1].startswith("chillfl: error: rounds: ")
    assert not (tmp_path / "res").exists()


def test_under_dry_run_the_note_does_not_point_to_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    assert main(["run", str(empty), "--dry-run"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"chillfl: note: {empty} sets nothing; the config is the defaults"
    assert main(["run", str(empty), "rounds=3", "--dry-run"]) == 2
    assert "running" not in capsys.readouterr().err

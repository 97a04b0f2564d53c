"""``--data-dir=~/data`` and ``reproduce --out=~/r`` reach chillfl unexpanded (no shell expands a ``~`` after ``=``):
a run's ``data_dir`` / ``out_dir`` is the home folder there (RunConfig), ``data download`` and ``reproduce`` made a folder
literally named ``~`` in the current one (fsfix2 left them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main


def test_data_download_reads_a_leading_tilde_as_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    assert main(["data", "download", "--data-dir=~/data"]) == 0  # the listing of what is there: reads, makes nothing
    out = capsys.readouterr().out
    assert str(home / "data") in out and not (here / "~").exists(), out

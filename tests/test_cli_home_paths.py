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


def test_output_files_read_a_leading_tilde_as_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``report --output=~/r.html``, ``data show -o``, the analyses' ``-o``: an output path typed after ``=`` wrote into
    a folder named ``~`` in the current one (rev104c 4)."""
    import argparse

    from chillfl.analysis.output import add_out
    from chillfl.cli import build_parser

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    args = build_parser().parse_args(["report", "x", "--output=~/r.html"])
    assert args.output == str(home / "r.html")
    args = build_parser().parse_args(["data", "show", "c.toml", "--output=~/p.png"])
    assert args.output == str(home / "p.png")
    parser = argparse.ArgumentParser()
    add_out(parser, "where")
    assert parser.parse_args(["--out=~/figs"]).out == str(home / "figs")

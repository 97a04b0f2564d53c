"""An analysis (and a report) of a finished run read its relative ``partition.from`` / ``data_dir`` from the folder the run
was started in, as ``chillfl resume`` does: typed in another folder, it was refused ("cannot read 'p é.json'")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from chillfl.cli import main

TOML = ('name = "tiny"\nseed = 0\n[federation]\nnum_clients = 2\nrounds = 1\nclients_per_round = 2\n[client]\nepochs = 1\n'
        '[dataset]\nname = "digits"\n[model]\nname = "mlp"\n')


def _scores(out: Path) -> dict[str, object]:
    runs = json.loads((out / "calibration.json").read_text())["runs"]
    return {k: v for k, v in runs["pf"].items() if k != "run_dir"}  # run_dir: as typed, relative to where it was typed


def test_an_analysis_from_another_folder_reads_the_runs_relative_partition_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "tiny.toml").write_text(TOML)
    (tmp_path / "wd a").mkdir()
    (tmp_path / "wd b").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["run", "tiny.toml", "-q", "--out", "first"]) == 0
    shutil.copy(tmp_path / "first" / "tiny" / "partition.json", tmp_path / "wd a" / "p é.json")
    monkeypatch.chdir(tmp_path / "wd a")
    assert main(["run", "../tiny.toml", "-q", "partition.from=p é.json", "--out", "o ut", "name=pf"]) == 0
    assert main(["analyze", "calibration", "o ut/pf", "-q", "-o", str(tmp_path / "here")]) == 0
    monkeypatch.chdir(tmp_path / "wd b")
    assert main(["analyze", "calibration", "../wd a/o ut/pf", "-q", "-o", str(tmp_path / "there")]) == 0, capsys.readouterr().err
    assert _scores(tmp_path / "there") == _scores(tmp_path / "here")
    assert main(["report", "../wd a/o ut/pf", "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "could not be rebuilt" not in page and 'alt="partition' in page  # was: "its data could not be rebuilt ...", no heat map

"""``chillfl status`` of a stopped run whose ``partition.from`` file ``chillfl resume`` refuses: an older noisy file (a
``feature_noise`` split saved before ``partition.json`` recorded the clients' noise) or a split file moved or deleted
since. Status said "resumes after round 1, its checkpoint" (status never read the file) and resume then refused it; now
status asks resume's own check of the file (:func:`chillfl.data.partition_file.check_file`) and says why, and what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.runner import run_experiment
from test_resume_added_options import Crash, CrashIn2

NOISY: dict[str, Any] = {
    "device": "cpu", "dataset.name": "digits", "model.name": "mlp", "model.hidden": [8], "partition.name": "feature_noise",
    "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 1, "client.batch_size": 32,
}


def _stopped_on_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A feature_noise run's ``partition.json``, and a run on it (``partition.from``) stopped after round 1's checkpoint."""
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    run_experiment(load_config(None, {**NOISY, "name": "split", "out_dir": str(tmp_path)}), progress=False)
    split = tmp_path / "split" / "partition.json"
    on = {**NOISY, "partition.name": "file", "partition.from": str(split), "federation.rounds": 2, "checkpoint.every": 1}
    with pytest.raises(Crash):
        run_experiment(load_config(None, {**on, "name": "run", "out_dir": str(tmp_path)}), progress=False, callbacks=[CrashIn2()])
    return split, tmp_path / "run.partial"


def _line(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["status", str(folder)]) == 0
    return capsys.readouterr().out.splitlines()[3]


def _resume_error(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["resume", str(folder), "-q"]) == 2
    return capsys.readouterr().err


def test_status_of_a_run_on_an_older_noisy_file_says_resume_refuses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    split, folder = _stopped_on_file(tmp_path, monkeypatch)
    assert "resumes after round 1, its checkpoint" in _line(folder, capsys)
    record = json.loads(split.read_text())
    del record["noise"]  # as a chillfl before 2026-12-06 wrote it
    split.write_text(json.dumps(record))
    line = _line(folder, capsys)
    assert "resumes" not in line and "resume refuses it" in line and "partition.from" in line, line
    assert "cannot go on as it began: start it again" in line, line
    assert "partition.from" in _resume_error(folder, capsys)  # what status says, resume does


def test_status_of_a_run_whose_split_file_is_gone_says_resume_refuses_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    split, folder = _stopped_on_file(tmp_path, monkeypatch)
    split.unlink()
    line = _line(folder, capsys)
    assert "resumes" not in line and "resume refuses it" in line and "FileNotFoundError" in line, line
    assert "put the file back" in line, line
    assert "FileNotFoundError" in _resume_error(folder, capsys)


def test_status_of_a_run_on_a_sound_file_still_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _, folder = _stopped_on_file(tmp_path, monkeypatch)
    assert "resumes after round 1, its checkpoint" in _line(folder, capsys)
    capsys.readouterr()
    assert main(["resume", str(folder), "-q"]) == 0


def test_status_of_a_comparisons_stopped_run_whose_split_file_is_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """A comparison's run reads ``partition.from`` from the comparison's start folder (relative here): its line says it too."""
    from test_sweep_resume import _interrupt

    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    run_experiment(load_config(None, {**NOISY, "partition.name": "iid", "name": "split", "out_dir": str(tmp_path)}), progress=False)
    monkeypatch.chdir(tmp_path)
    _interrupt(monkeypatch, run=2, after_round=1)
    (tmp_path / "c.toml").write_text("")
    assert main(["compare", "c.toml", "--grid", "client.lr=0.05,0.1", "-q", "name=c", "out_dir=out", "device=cpu", "dataset.name=digits",
                 "model.name=mlp", "model.hidden=[8]", "partition.from=split/partition.json", "federation.num_clients=4",
                 "federation.clients_per_round=2", "federation.rounds=2", "checkpoint.every=1"]) == 130
    folder = tmp_path / "out" / "c-compare.partial"
    assert "resumes after round 1, its checkpoint" in capsys.readouterr().out + _table(folder, capsys)
    (tmp_path / "split" / "partition.json").unlink()
    table = _table(folder, capsys)
    assert "resume refuses it, its partition.from: cannot read" in table and "resumes" not in table, table


def _table(folder: Path, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["status", str(folder)]) == 0
    return capsys.readouterr().out

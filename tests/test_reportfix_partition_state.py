"""The HTML report's line of a stopped run whose ``partition.from`` file ``chillfl resume`` would refuse (changed since the
run): it says what ``chillfl status`` says, that resume refuses it and why. Before, only status checked the file, and the
report's row said "resumes after round 1, its checkpoint" of the same run."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.report.html import render
from test_statusfix_partition_from import _line, _resume_error, _stopped_on_file


def _report_line(folder: Path) -> str:
    return html.unescape(render([folder], models=False, partitions=False))


def test_the_report_and_status_agree_on_a_changed_split_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    split, folder = _stopped_on_file(tmp_path, monkeypatch)
    assert "resumes after round 1, its checkpoint" in _report_line(folder)
    record = json.loads(split.read_text())
    record["clients"] = record["clients"][:3]  # changed after the run: 3 clients of the run's 4
    split.write_text(json.dumps(record))
    state = _line(folder, capsys).split(" | ")[1]  # status's own cell
    assert state.startswith("stopped (resume refuses it, its partition.from: ") and "has 3 clients; federation.num_clients is 4" in state, state
    page = _report_line(folder)
    assert f"run: {state}, " in page and "resumes after" not in page
    assert "has 3 clients" in _resume_error(folder, capsys)  # what both say, resume does


def test_the_report_still_says_a_sound_split_file_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _, folder = _stopped_on_file(tmp_path, monkeypatch)
    assert "run: stopped (resumes after round 1, its checkpoint), " in _report_line(folder)
    capsys.readouterr()
    assert main(["resume", str(folder), "-q"]) == 0

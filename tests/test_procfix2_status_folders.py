"""``chillfl status`` of several folders, and of a folder of result folders (a job array's parent ``--out``).

``chillfl status par/*`` was an argparse error (one folder only), and ``chillfl status par`` "is not a chillfl result
folder". Each named folder is shown, one after another; a folder that is none but holds some shows each of theirs (as
``chillfl report`` walks a folder of runs); a folder that cannot be read is one line naming it, the others are still
shown, and the exit status is 2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.cli import main

from test_sweep_shard import CONFIG

RUN_CONFIG = CONFIG.split("[compare]")[0]


def _diverged(folder: Path, name: str) -> Path:
    run = folder / f"{name}.failed"
    run.mkdir(parents=True)
    (run / "config.toml").write_text(RUN_CONFIG.replace('name = "sh"', f'name = "{name}"'))
    (run / "failure.json").write_text(json.dumps({"round": 1}))
    return run


def _stopped(folder: Path, name: str) -> Path:
    run = folder / f"{name}.partial"
    run.mkdir(parents=True)
    (run / "config.toml").write_text(RUN_CONFIG.replace('name = "sh"', f'name = "{name}"'))
    (run / "metrics.jsonl").write_text(json.dumps({"round": 1, "clients": [0]}) + "\n")
    return run


def _tables(out: str) -> list[list[str]]:
    """stdout's tables (separated by a blank line), each its lines."""
    return [block.splitlines() for block in out.strip().split("\n\n")]


def test_several_folders_are_shown_one_after_another(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _diverged(tmp_path, "a"), _stopped(tmp_path, "b")
    capsys.readouterr()
    assert main(["status", str(a), str(b)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    tables = _tables(captured.out)
    assert [t[0] for t in tables] == [f"{a}: one run", f"{b}: one run"]
    assert tables[0][3] == "| a | diverged (at round 1) | 0/2 | - |"
    assert tables[1][3] == "| b | stopped (before its first checkpoint: resume refuses it; run its config.toml again) | 1/2 | - |"


def test_a_folder_of_result_folders_shows_each_of_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    parent = tmp_path / "par"
    b, a = _stopped(parent, "b"), _diverged(parent, "a")
    (parent / "data").mkdir()  # no result folder: left out
    (parent / "notes.txt").write_text("x")
    capsys.readouterr()
    assert main(["status", str(parent)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert [t[0] for t in _tables(captured.out)] == [f"{a}: one run", f"{b}: one run"]  # sorted


def test_a_bad_folder_among_several_is_one_line_naming_it_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _diverged(tmp_path / "par", "a")
    broken = tmp_path / "par" / "c-compare.partial"
    broken.mkdir()
    (broken / "config.toml").write_text(CONFIG)
    (broken / "sweep.json").write_text("{not json")  # a comparison whose record cannot be read
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = tmp_path / "missing"
    capsys.readouterr()
    assert main(["status", str(empty), str(tmp_path / "par"), str(missing)]) == 2
    captured = capsys.readouterr()
    assert [t[0] for t in _tables(captured.out)] == [f"{a}: one run"]  # the readable one is still shown
    err = captured.err.strip().splitlines()
    assert len(err) == 3, err
    assert err[0].startswith("chillfl: error: ") and f"{empty} is not a chillfl result folder" in err[0]
    assert err[1].startswith("chillfl: error: ") and str(broken) in err[1]
    assert err[2].startswith("chillfl: error: ") and f"{missing} does not exist" in err[2]
    assert "Traceback" not in captured.err


def test_an_empty_parent_is_still_no_result_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "data").mkdir()
    assert main(["status", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chillfl: error: run_dir: {tmp_path} is not a chillfl result folder (no config.toml)"]


def test_a_temperature_sweep_beside_the_runs_is_left_out_as_chillfl_report_leaves_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``analyze temperature-sweep`` writes ``<out_dir>/<name>-temperature-sweep/`` (with a ``config.toml``) beside the
    runs: ``chillfl status results`` took it for a run and ended with its refusal, exit 2."""
    from chillfl.storage.run_folder import TEMPERATURE_SWEEP_FILE

    parent = tmp_path / "results"
    a = _diverged(parent, "a")
    sweep = parent / "a-temperature-sweep"
    sweep.mkdir()
    (sweep / "config.toml").write_text(RUN_CONFIG)
    (sweep / TEMPERATURE_SWEEP_FILE).write_text("{}")
    capsys.readouterr()
    assert main(["status", str(parent)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and [t[0] for t in _tables(captured.out)] == [f"{a}: one run"]

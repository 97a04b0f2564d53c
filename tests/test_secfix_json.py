"""A received run or comparison folder read as data: JSON nested too deeply is a damaged file, not a RecursionError traceback (F4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

from received_folder import DEEP, copy_run, make_run

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("secfix"))


def test_json_loads_says_deep_nesting_is_not_json() -> None:
    from chillfl.errors import json_loads

    with pytest.raises(ValueError, match="nested too deeply"):
        json_loads(DEEP)
    assert json_loads("[[1]]") == [[1]]


def test_status_of_a_run_with_deeply_nested_files(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run(run_dir, tmp_path)
    (run / "summary.json").write_text(DEEP)
    assert main(["status", str(run)]) == 0
    assert "summary.json is unreadable" in capsys.readouterr().out
    run2 = copy_run(run_dir, tmp_path, "tiny2")
    with (run2 / "metrics.jsonl").open("a") as fh:
        fh.write(DEEP + "\n")
    assert main(["status", str(run2)]) == 0
    assert "| tiny2 | finished |" in capsys.readouterr().out


def test_readers_of_deeply_nested_files_raise_value_errors(run_dir: Path, tmp_path: Path) -> None:
    from chillfl.analysis.replay import read_summary
    from chillfl.errors import ConfigError
    from chillfl.report.html import load_run
    from chillfl.storage.results import read_metrics
    from chillfl.sweeps.record import read_sweep

    run = copy_run(run_dir, tmp_path)
    (run / "summary.json").write_text(DEEP)
    with pytest.raises(ValueError, match="nested too deeply"):
        read_summary(run)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_run(run)
    (run / "metrics.jsonl").write_text(DEEP + "\n")
    with pytest.raises(ValueError, match="nested too deeply"):
        read_metrics(run)
    (run / "sweep.json").write_text(DEEP)
    with pytest.raises(ConfigError, match="nested too deeply"):
        read_sweep(run)


def test_report_of_a_run_with_a_deep_summary_is_one_line(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = copy_run(run_dir, tmp_path)
    (run / "summary.json").write_text(DEEP)
    assert main(["report", str(run), "-o", str(tmp_path / "r.html"), "--no-models", "--no-partitions"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nested too deeply" in err[0]

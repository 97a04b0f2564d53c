"""``chillfl status`` of a run that has just claimed its ``.partial`` (``metrics.jsonl`` open, ``config.toml`` not yet
written): a run starting, not "not a chillfl result folder"."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.storage.results import RunLock


def _claimed(parent: Path) -> Path:
    folder = parent / "one.partial"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").touch()
    return folder


def test_a_parent_holding_only_a_starting_run_shows_it_starting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _claimed(tmp_path / "out")
    lock = RunLock(folder)  # what ResultWriter holds while the run starts
    try:
        assert main(["status", str(tmp_path / "out")]) == 0
        out = capsys.readouterr().out.splitlines()
        assert main(["status", str(folder)]) == 0
        direct = capsys.readouterr().out.splitlines()
    finally:
        lock.release()
    assert out == [f"{folder}: one run", "| run | state | rounds | accuracy % |", "|---|---|---|---|", "| one | running (starting: its config.toml is not written yet) | 0 | - |"]
    assert direct == out


def test_a_claimed_run_no_process_holds_is_stopped_before_its_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _claimed(tmp_path / "out")
    assert main(["status", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.splitlines()[3] == "| one | stopped (before it wrote its config.toml: nothing to resume; start the run again) | 0 | - |"
    assert folder.is_dir()


def test_an_empty_folder_is_still_no_result_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "out" / "other").mkdir(parents=True)
    assert main(["status", str(tmp_path / "out")]) == 2
    assert "is not a chillfl result folder (no config.toml)" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["empty.partial", "t-compare.partial"])
def test_a_partial_folder_without_a_runs_metrics_is_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """A stray empty ``x.partial``, or a comparison's folder claimed a moment before it writes its records, was listed
    as "one run | stopped (before it wrote its config.toml ...)": no run has claimed it (no ``metrics.jsonl``)."""
    (tmp_path / "out" / name).mkdir(parents=True)
    assert main(["status", str(tmp_path / "out")]) == 2
    assert "is not a chillfl result folder" in capsys.readouterr().err

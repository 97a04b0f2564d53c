"""``chillfl analyze``'s progress lines (``[k/N]`` of calibration, cka, aggregation-*, grad-norms, scarlet-deficit) and
temperature-sweep's left-out lines start with ``chillfl:``, as every other line chillfl says on stderr does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chillfl.cli import main

from received_folder import make_run



@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("anafix"), rounds=1)


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def test_counted_lines_on_stderr_start_with_chillfl(capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.analysis.counting import Counted

    counted = Counted(2, "calibration", clock=lambda: 0.0)
    counted.finished("a")
    Counted(3, "scarlet-deficit", clock=lambda: 0.0).starting("DS-FL, seed 0")
    assert _err_lines(capsys) == ["chillfl: calibration: [1/2] a (0s, ETA 0s)", "chillfl: scarlet-deficit: [1/3] DS-FL, seed 0"]


def test_every_stderr_line_of_an_analysis_over_runs_starts_with_chillfl(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "calibration", str(run_dir), str(run_dir), "-o", str(tmp_path / "a")]) == 0
    err = _err_lines(capsys)
    assert len(err) == 2 and all(line.startswith("chillfl: calibration: [") for line in err), err


def test_the_sweeps_left_out_line_starts_with_chillfl(capsys: pytest.CaptureFixture[str]) -> None:
    from chillfl.analysis.temperature_sweep import SweepResult, left_out

    nan = float("nan")
    acc = np.array([[0.5, 0.6], [0.7, 0.4], [nan, nan]])
    result = SweepResult([0.5, 1.0], acc, acc, np.ones((3, 2)), np.zeros(3), np.array([1.0, 0.5, nan]), np.array([0.6, 0.7, nan]), np.zeros(3))
    left_out(result)
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("chillfl: temperature sweep: clients [2] have no finite accuracy"), err

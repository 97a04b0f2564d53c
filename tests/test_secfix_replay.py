"""A finished FedAvg run whose ``model.safetensors`` is missing (or is no regular file) was told that "a
parameter-sharing (fedavg) run has no global model: each client keeps its own", which is false: FedAvg writes its
global model when it ends. The line now says the file is missing or not a regular file, naming it. A protocol that
truly has none (prototype sharing without models: tests/test_analyses.py) keeps its own reason."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chillfl.cli import main
from received_folder import copy_run, make_run
from test_secfix_report_readers import _within


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("secfix-replay"), rounds=1)


@pytest.mark.parametrize("planted", ["missing", "fifo"])
def test_a_fedavg_run_without_its_model_file_is_told_the_file_is_missing(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: str) -> None:
    run = copy_run(run_dir, tmp_path)
    (run / "model.safetensors").unlink()
    if planted == "fifo":
        os.mkfifo(run / "model.safetensors")
    argv = ["analyze", "calibration", str(run), "-o", str(tmp_path / "x")]
    # a reader that opened the FIFO would block forever: fail within seconds instead of hanging the suite
    assert (_within(lambda: main(argv), run / "model.safetensors") if planted == "fifo" else main(argv)) == 2
    expected = (f"chillfl: error: run_dir: {run / 'model.safetensors'} is missing or not a regular file "
                "(a parameter-sharing (fedavg) run writes its global model there when it ends)")
    assert capsys.readouterr().err.strip() == expected
    assert not (tmp_path / "x").exists()

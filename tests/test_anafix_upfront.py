"""``chillfl analyze`` checks its output folder, ``--bins`` and every RUN_DIR before the first run is computed: over
several runs a bad ``-o`` or ``--bins`` was refused only after every run had been computed (minutes at scale), and
temperature-sweep's ``out_dir`` after the whole sweep had trained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main

from received_folder import make_run

SWEEP = ('name = "anafix"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\nhidden = [16]\n[federation]\nnum_clients = 3\n'
         "[client]\nepochs = 1\nbatch_size = 64\n[eval]\nclient_split_size = 30\n")
OVER_RUNS = ["calibration", "cka", "aggregation-accuracy", "aggregation-entropy", "grad-norms"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("anafix"), rounds=1)


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("analysis", OVER_RUNS)
def test_an_output_under_a_file_is_refused_before_any_run_is_computed(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], analysis: str) -> None:
    """It was refused after every run had been computed (a [k/N] line per run before the error)."""
    (tmp_path / "f").write_text("")
    assert main(["analyze", analysis, str(run_dir), str(run_dir), "-o", str(tmp_path / "f" / "x")]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("chillfl: error: --out: ") and "which is a file" in err[0], err


@pytest.mark.parametrize("name", ["reliability.png", "calibration.json"])
def test_an_output_folder_named_as_a_file_is_refused(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    """``-o reliability.png`` made a folder of that name, the figure inside it."""
    assert main(["analyze", "calibration", str(run_dir), "-o", str(tmp_path / name)]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("chillfl: error: --out: is the folder") and "give a folder" in err[0], err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / name).mkdir()  # a folder that is there is one, whatever its name
    assert main(["analyze", "calibration", str(run_dir), "-o", str(tmp_path / name), "-q"]) == 0
    assert (tmp_path / name / "calibration.json").is_file()


def test_more_bins_than_test_samples_are_refused_before_any_run_is_computed(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    n = json.loads((run_dir / "summary.json").read_text())["calibration"]["n"]
    assert main(["analyze", "calibration", str(run_dir), str(run_dir), "--bins", str(n + 1), "-o", str(tmp_path / "a")]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: --bins: {n + 1} bins for tiny's {n} test samples"), err
    assert not (tmp_path / "a").exists()


def test_a_bad_last_run_dir_is_refused_before_the_first_is_computed(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "calibration", str(run_dir), str(tmp_path / "nope"), "-o", str(tmp_path / "a")]) == 2
    err = _err_lines(capsys)
    assert err == [f"chillfl: error: run_dir: {tmp_path / 'nope'} does not exist"]


def test_the_sweeps_out_dir_is_checked_before_it_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.analysis.temperature_sweep as sweep

    def trained(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the sweep trained before its output was checked")

    monkeypatch.setattr(sweep, "train_client", trained)
    (tmp_path / "exp.toml").write_text(SWEEP)
    (tmp_path / "f").write_text("")
    assert main(["analyze", "temperature-sweep", str(tmp_path / "exp.toml"), "--temperatures", "0.5,1", "-q", f"out_dir={tmp_path / 'f' / 'x'}"]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("chillfl: error: out_dir: ") and "which is a file" in err[0], err

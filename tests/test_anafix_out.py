"""Every analysis that writes files spells its output option ``-o/--out`` (cache-ratio took ``-o/--output``,
soft-label-entropy ``--out-dir``, temperature-sweep only the override ``out_dir=``); the old spellings are still
accepted, hidden from ``--help``, and an error names the spelling typed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main

SWEEP = ('name = "anafix"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\nhidden = [16]\n[federation]\nnum_clients = 3\n'
         "[client]\nepochs = 1\nbatch_size = 64\n[eval]\nclient_split_size = 30\n")
OVER_RUNS = ["calibration", "cka", "aggregation-accuracy", "aggregation-entropy", "grad-norms"]


def _err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.strip().splitlines()


def _help(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, analysis: str) -> str:
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main(["analyze", analysis, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize(("analysis", "old"), [*[(a, None) for a in OVER_RUNS], ("cache-ratio", "--output"), ("soft-label-entropy", "--out-dir"), ("temperature-sweep", None)])
def test_every_analysis_that_writes_spells_its_output_o_out(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, analysis: str, old: str | None) -> None:
    text = _help(capsys, monkeypatch, analysis)
    assert re.search(r"-o (DIR|FILE), --out (DIR|FILE)", text), text
    assert old is None or old not in text  # accepted, not shown


def test_cache_ratio_takes_out_and_still_its_old_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    small = ["analyze", "cache-ratio", "--public-size", "100", "--subset-size", "10", "--durations", "5", "--rounds", "5"]
    for flag, name in (("-o", "a.png"), ("--out", "b.png"), ("--output", "c.png")):
        assert main([*small, flag, str(tmp_path / name)]) == 0
        assert capsys.readouterr().out.splitlines()[-1] == f"plot: {tmp_path / name}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.png", "c.png"]
    (tmp_path / "f").write_text("")
    for flag in ("-o", "--output"):  # the error names the spelling typed (-o is --out)
        assert main([*small, flag, str(tmp_path / "f" / "x.png")]) == 2
        assert _err_lines(capsys)[0].startswith(f"chillfl: error: {'--out' if flag == '-o' else flag}: ")


def test_soft_label_entropy_takes_o_and_still_its_old_out_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for flag, name in (("-o", "a"), ("--out", "b"), ("--out-dir", "c")):
        assert main(["analyze", "soft-label-entropy", "--temps", "0.5,1", "--betas", "1,2", flag, str(tmp_path / name)]) == 0
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["entropy_vs_beta.png", "entropy_vs_temperature.png"]
    capsys.readouterr()
    assert main(["analyze", "soft-label-entropy", "-o", str(tmp_path / "x.png")]) == 2  # a file name for the folder
    assert _err_lines(capsys)[0].startswith("chillfl: error: --out: is the folder")


def test_temperature_sweep_writes_its_folder_into_o(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "exp.toml").write_text(SWEEP)
    base = ["analyze", "temperature-sweep", str(tmp_path / "exp.toml"), "--temperatures", "0.5,1", "-q"]
    assert main([*base, "-o", str(tmp_path / "o"), f"out_dir={tmp_path / 'override'}"]) == 0  # -o wins, as run's --out does
    assert capsys.readouterr().out.splitlines()[-1] == f"results: {tmp_path / 'o' / 'anafix-temperature-sweep'}"
    assert (tmp_path / "o" / "anafix-temperature-sweep" / "heatmap.png").is_file() and not (tmp_path / "override").exists()
    assert main([*base, f"out_dir={tmp_path / 'old'}"]) == 0  # the override alone, as before
    assert (tmp_path / "old" / "anafix-temperature-sweep" / "heatmap.png").is_file()


def test_temperature_sweeps_o_is_checked_before_it_trains(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.analysis.temperature_sweep as sweep

    def trained(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the sweep trained before its output was checked")

    monkeypatch.setattr(sweep, "train_client", trained)
    (tmp_path / "exp.toml").write_text(SWEEP)
    (tmp_path / "f").write_text("")
    assert main(["analyze", "temperature-sweep", str(tmp_path / "exp.toml"), "--temperatures", "0.5,1", "-q", "-o", str(tmp_path / "f" / "x")]) == 2
    err = _err_lines(capsys)
    assert len(err) == 1 and err[0].startswith("chillfl: error: --out: ") and "which is a file" in err[0], err

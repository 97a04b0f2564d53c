"""benchmarks/run.py's command line and report (task benchfix): threads recorded, one s/round measure, options checked
before anything is measured. Nothing here measures: the measured process and the workloads are stubbed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


import run  # noqa: E402
from workloads import workload  # noqa: E402


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def no_measuring(*_: Any, **__: Any) -> None:
    raise AssertionError("a workload was measured")


def quiet_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> int:
    """run.main on workload 2, chillfl[auto] only, with nothing measured (run_workload leaves the workload empty)."""
    monkeypatch.setattr(run, "run_workload", lambda *_, **__: {})
    return run.main(["--workload", "2", "--no-peers", "--no-bound", "--modes", "chillfl[auto]", "--data-dir", str(tmp_path / "d"), *extra])


def test_the_report_and_header_record_an_inherited_omp_num_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The workers inherit OMP_NUM_THREADS (the peers and the bound follow it): the JSON once said "default" anyway."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    out = tmp_path / "r.json"
    assert quiet_main(tmp_path, monkeypatch, "--out", str(out)) == 0
    report = json.loads(out.read_text())
    assert report["threads"] == "OMP_NUM_THREADS=3 (inherited)"
    assert "chillfl's modes set their own" in report["threads_reach"]
    assert "workers' threads: OMP_NUM_THREADS=3 (inherited)" in capsys.readouterr().out
    assert quiet_main(tmp_path, monkeypatch, "--out", str(out), "--threads", "2") == 0
    assert json.loads(out.read_text())["threads"] == "OMP_NUM_THREADS=2 (--threads)"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert run.threads_setting(None, {}).startswith("default")


def test_the_progress_line_leaves_the_warm_up_round_out_as_the_table_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Rounds of 10 s (warm-up), 1 s and 2 s: 1.5 s/round everywhere (the progress line once said 2.000, round 1 counted)."""
    clock = {"t_loop_start": 100.0, "round_end": [110.0, 111.0, 113.0]}
    monkeypatch.setattr(run, "measure", lambda *_: run.Measured(0, 14.0, 1.0, 1.0, dict(clock), 99.0))
    monkeypatch.setattr(run, "write_data", lambda *_: None)
    args = run.parse_args(["--workload", "1", "--scale", "0.02", "--rounds", "3", "--repeats", "1", "--no-ops", "--data-dir", str(tmp_path)])
    entry = run.run_workload(workload("1", 0.02), run.select_modes(run.all_modes("cpu"), ""), {}, args, tmp_path)
    assert entry["modes"]["compute_bound"]["s_per_round_median"] == 1.5
    assert " 1.500 s/round" in capsys.readouterr().out


def test_a_modes_substring_that_matches_nothing_exits_2_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        run.parse_args(["--modes", "chillfl[auto],chillfl[atuo]"])
    assert stop.value.code == 2
    line = one_error_line(capsys)
    assert "'chillfl[atuo]'" in line and "chillfl[auto+compile]" in line and "'chillfl[auto]'" not in line
    assert run.unmatched(run.all_modes("cuda"), "graphs, flower") == []


@pytest.mark.parametrize("argv, field", [
    (["--timeout", "0"], "--timeout"), (["--timeout", "-1"], "--timeout"), (["--threads", "0"], "--threads"),
    (["--threads", "-1"], "--threads"), (["--quick", "--scale", "0.5"], "--quick"),
])
def test_nonsense_options_exit_2_with_one_line(argv: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        run.parse_args(argv)
    assert stop.value.code == 2 and one_error_line(capsys).startswith(f"run.py: {field}")


def test_quick_alone_and_scale_alone_still_work() -> None:
    assert run.parse_args(["--quick"]).scale == 0.02 and run.parse_args(["--scale", "0.5"]).scale == 0.5
    assert run.parse_args([]).scale == 1.0


def test_help_lists_the_modes_of_each_device(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run.parse_args(["--help"])
    text = capsys.readouterr().out
    cpu, cuda = text.split("modes with --device cpu:")[1].split("modes with --device cuda:")
    assert "chillfl[processes]" in cpu and "chillfl[auto+graphs]" not in cpu
    assert "chillfl[auto+graphs]" in cuda and "chillfl[processes]" not in cuda


@pytest.mark.parametrize("bad", ["folder", "under_a_file", "md"])
def test_a_bad_out_exits_2_before_anything_is_measured(bad: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("x")
    out = {"folder": tmp_path, "under_a_file": tmp_path / "file" / "r.json", "md": tmp_path / "r.md"}[bad]
    monkeypatch.setattr(run, "run_workload", no_measuring)
    assert run.main(["--workload", "2", "--no-peers", "--out", str(out), "--data-dir", str(tmp_path / "d")]) == 2
    assert one_error_line(capsys).startswith("run.py: --out: ")


def test_the_table_is_printed_before_the_files_are_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The out path turns into a folder during the run: the table is still shown, then one line says why no file."""
    out = tmp_path / "r.json"

    def taken(*_: Any, **__: Any) -> dict[str, Any]:
        out.mkdir()
        return {}

    monkeypatch.setattr(run, "run_workload", taken)
    assert run.main(["--workload", "2", "--no-peers", "--no-bound", "--modes", "chillfl[auto]", "--out", str(out),
                     "--data-dir", str(tmp_path / "d")]) == 1
    captured = capsys.readouterr()
    assert "load average" in captured.out and "results:" not in captured.out
    assert captured.err.strip().startswith("run.py: --out: cannot write") and len(captured.err.strip().splitlines()) == 1

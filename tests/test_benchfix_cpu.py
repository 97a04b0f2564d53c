"""benchmarks/ on the CPU (report benchcpu): bad --seed / --data-dir refused in one line before anything is written,
Ctrl-C keeps what was measured, a loaded machine is warned of, the peak column, the op count's denominator, and
many_clients.py's data under TMPDIR. Nothing here measures: the measured process and the workloads are stubbed."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

import many_clients  # noqa: E402
import run  # noqa: E402
from test_benchfix_run import no_measuring, one_error_line, quiet_main  # noqa: E402
from workloads import workload  # noqa: E402


def test_a_negative_seed_exits_2_naming_it_and_makes_no_data_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """It once printed the header, then numpy's traceback, and left an empty data-n50000-s-1/."""
    monkeypatch.setattr(run, "run_workload", no_measuring)
    with pytest.raises(SystemExit) as exc:
        run.main(["--workload", "2", "--no-peers", "--seed", "-1", "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path / "r.json")])
    assert exc.value.code == 2
    assert one_error_line(capsys).startswith("run.py: --seed")
    assert not (tmp_path / "d").exists() and not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("under", ["", "sub"])
def test_a_data_dir_that_is_a_file_exits_2_naming_it(under: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """pathlib's NotADirectoryError traceback before; now one line, and no --out folder made."""
    (tmp_path / "afile").write_text("x")
    monkeypatch.setattr(run, "run_workload", no_measuring)
    with pytest.raises(SystemExit) as exc:
        run.main(["--workload", "2", "--no-peers", "--data-dir", str(tmp_path / "afile" / under), "--out", str(tmp_path / "o" / "r.json")])
    assert exc.value.code == 2
    assert one_error_line(capsys) == f"run.py: --data-dir: {tmp_path / 'afile'} is not a folder"
    assert not (tmp_path / "o").exists()


def test_data_already_written_are_used_without_a_check_and_a_seed_of_0_is_fine(tmp_path: Path) -> None:
    """A folder whose data are done is only read (it may be read-only); seed 0 is the default, not refused."""
    from workloads import data_dir, data_problem

    folder = data_dir(tmp_path, 500, 0)
    folder.mkdir(parents=True)
    (folder / "done").write_text("ok")
    assert data_problem(tmp_path, 0, [500]) is None
    (tmp_path / "f").write_text("x")
    assert data_problem(tmp_path / "f", 0, [500]) == f"--data-dir: {tmp_path / 'f'} is not a folder"


def test_many_clients_refuses_a_data_dir_that_is_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "afile").write_text("x")
    with pytest.raises(SystemExit) as exc:
        many_clients.main(["--rounds", "2", "--data-dir", str(tmp_path / "afile")])
    assert exc.value.code == 2
    assert one_error_line(capsys) == f"many_clients.py: --data-dir: {tmp_path / 'afile'} is not a folder"


class _Written(Exception):
    """Raised by the stubbed write_data: where many_clients.py would have written its data."""


def test_many_clients_data_go_under_tmpdir_as_run_py_s(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its default was a literal /tmp: with TMPDIR set, a second 614 MB copy of run.py's data."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # what gettempdir() returns once TMPDIR has been read

    def where(folder: Path, *_: Any) -> None:
        raise _Written(str(folder))

    monkeypatch.setattr(many_clients, "write_data", where)
    with pytest.raises(_Written) as exc:
        many_clients.main(["--clients", "1000", "--rounds", "2"])
    assert Path(str(exc.value)) == tmp_path / "chillfl-bench-data" / "data-n50000-s0"
    assert run.parse_args(["--workload", "2"]).data_dir == tmp_path / "chillfl-bench-data"  # the same folder as run.py's


def measured_then(exc: BaseException) -> Any:
    """A run_workload that measures chillfl[auto] of workload 2 (stubbed numbers), then is interrupted by ``exc``."""

    def fake(w: Any, modes: Any, peers: Any, args: Any, work: Path, sink: dict[str, Any]) -> dict[str, Any]:
        mode = {"status": "ok", "s_per_round_min": 0.1, "s_per_round_median": 0.2, "peak_mb": 300.0, "first_round_end_s_median": 1.5}
        sink.update(workload=w.to_dict(), rounds_per_run=2, flops_per_round=0, modes={"chillfl[auto]": mode})
        raise exc

    return fake


def test_ctrl_c_writes_the_modes_measured_so_far_as_sigterm_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C once ended in a KeyboardInterrupt traceback and no JSON or table: hours of workload 1 lost."""
    monkeypatch.setattr(run, "run_workload", measured_then(KeyboardInterrupt()))
    out = tmp_path / "r.json"
    try:
        rc = run.main(["--workload", "2", "--no-peers", "--no-bound", "--modes", "chillfl[auto]", "--data-dir", str(tmp_path / "d"), "--out", str(out)])
    except KeyboardInterrupt:  # caught here: escaping, it would stop the whole test session
        pytest.fail("Ctrl-C escaped run.main: nothing was written")
    assert rc == 130  # the shell's 128 + SIGINT, after writing
    report = json.loads(out.read_text())
    assert report["stopped"].startswith("stopped by Ctrl-C after ")
    assert report["workloads"]["2"]["modes"]["chillfl[auto]"]["s_per_round_median"] == 0.2
    assert "| 2 | chillfl[auto] | 0.100 | 0.200 |" in out.with_suffix(".md").read_text()
    assert "run.py: stopped by Ctrl-C" in capsys.readouterr().err


def test_sigterm_still_exits_0_after_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "run_workload", measured_then(run.Stopped()))
    out = tmp_path / "r.json"
    assert run.main(["--workload", "2", "--no-peers", "--no-bound", "--modes", "chillfl[auto]", "--data-dir", str(tmp_path / "d"),
                     "--out", str(out)]) == 0
    assert json.loads(out.read_text())["stopped"].startswith("stopped by SIGTERM after ")


def test_a_loaded_machine_is_warned_of_in_the_header_the_summary_and_the_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """At load ~7 on 2 cores the bound took 24x longer on 2 threads than on 1: its ratios read 0.05 x bound, unwarned."""
    monkeypatch.setattr(run, "machine", lambda: {"cpus": 2})
    monkeypatch.setattr(run.os, "getloadavg", lambda: (7.0, 6.0, 5.0))
    out = tmp_path / "r.json"
    assert quiet_main(tmp_path, monkeypatch, "--out", str(out)) == 0
    report = json.loads(out.read_text())
    assert report["load_average_start"][0] == report["load_average_end"][0] == 7.0
    assert "unreliable" in report["load_warning"] and "--threads 1" in report["load_warning"]
    warnings = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("warning: load average 7.0 above the 2 CPUs")]
    assert len(warnings) == 2  # at the start (before hours of measuring) and under the table


def test_the_load_warning_is_none_on_an_idle_machine_and_drops_the_threads_advice_when_given() -> None:
    assert run.load_warning([1.9, 2.0], 2, None) is None
    with_threads = run.load_warning([0.5, 2.5], 2, 1)
    assert with_threads is not None and "2.5 above the 2 CPUs" in with_threads and "--threads" not in with_threads


def test_the_md_table_names_the_peak_each_percentage_is_of() -> None:
    """The .md had no such column: an auto+bf16 row's % of peak was of an unnamed peak."""
    results = {"chillfl[auto+bf16]": {"status": "ok", "s_per_round_median": 2.0, "s_per_round_min": 1.0, "peak_mb": 10.0,
                                      "first_round_end_s_median": 3.0}}
    run.add_flop_rates(results, 4e9, 10.0, {"bf16": 40.0})  # 2 GFLOP/s of the bf16 peak 40: 5 %
    report = {"workloads": {"2": {"workload": workload("2").to_dict(), "rounds_per_run": 3, "flops_per_round": 4e9, "modes": results}}}
    header, rule, row = run.markdown_table(report).splitlines()
    assert header.endswith("| % of peak | peak | aten ops / client step |") and row.endswith("| 2.00 | 5.0 | bf16 |  |")
    assert header.count("|") == rule.count("|") == row.count("|")
    printed = next(ln for ln in run.fmt_table(report).splitlines() if ln.startswith("mode"))
    assert "% peak  peak " in printed


def test_the_op_count_divides_by_every_client_sgd_step_of_the_round() -> None:
    """Workload 3's 37,146 ops a round were divided by its 800 local steps only; its clients also distil 1,000 public
    rows each at batch 50: 100 x 20 = 2,000 steps more."""
    assert workload("3").client_sgd_steps_per_round == 400 // 50 * 100 + 100 * 1000 // 50 == 2800
    assert workload("2").client_sgd_steps_per_round == workload("2").steps_per_round == 100 * 50 // 10  # no distillation
    assert workload("1").client_sgd_steps_per_round == 100 * 5 * 500 // 50
    source = (Path(run.__file__).parent / "mode_chillfl.py").read_text()
    assert "count_round_ops(rounds_for(exp)(exp), w.client_sgd_steps_per_round" in source

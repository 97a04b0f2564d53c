"""benchmarks/run.py's printed start-up and tables, and gpu_targets.py's reading of them (task benchfix). Nothing here measures: the measured processes and the bare ``import torch`` are stubbed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


import gpu_targets  # noqa: E402
import run  # noqa: E402
from workloads import workload  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def startup_workload_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bare_import_s: float) -> dict[str, Any]:
    """Workload 2, chillfl[auto]: every run ends its round 1 at 1.0 s after launch; the bare import takes ``bare_import_s``."""
    clock = {"t_loop_start": 100.5, "round_end": [101.0, 101.5]}
    monkeypatch.setattr(run, "measure", lambda *_: run.Measured(0, 2.0, 1.0, 1.0, dict(clock), 100.0))
    monkeypatch.setattr(run, "write_data", lambda *_: None)
    monkeypatch.setattr(run, "time_import_torch", lambda *_: bare_import_s)
    args = run.parse_args(["--workload", "2", "--rounds", "2", "--repeats", "1", "--no-ops", "--no-bound", "--data-dir", str(tmp_path)])
    return run.run_workload(workload("2"), run.select_modes(run.modes_for(args), "chillfl[auto]"), {}, args, tmp_path)


def test_a_negative_paired_start_up_is_marked_unreliable_in_print_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # the progress line printed the dict's repr, and "paired median: -7.49 s" unmarked, which gpu_targets.py read as met
    entry = startup_workload_2(tmp_path, monkeypatch, bare_import_s=3.0)  # 1.0 s - 3.0 s: load, not a start-up
    start = entry["chillfl_startup_run_experiment"]["chillfl[auto]"]
    assert start["median_minus_import_torch_s"] == pytest.approx(-2.0) and start["minus_import_torch"] == "unreliable (load)"
    line = next(ln for ln in capsys.readouterr().out.splitlines() if "launch -> run_experiment" in ln)
    assert line == ("  chillfl[auto]: launch -> run_experiment (1 round) returned: min 1.00 s, median 1.00 s; "
                    "minus the bare import torch (median 3.00 s), paired median: -2.00 s unreliable (load)")
    report = {"workloads": {"2": json.loads(json.dumps(entry))}}
    assert line.strip() in run.fmt_table(report)  # the table says it as the progress line does
    assert "| -2.00 unreliable (load) |" in run.markdown_table(report)
    rows = {target: (measured, verdict) for target, measured, _, verdict in gpu_targets.targets(report["workloads"])}
    assert rows["W2 launch -> end of round 1 - import torch"] == ("-2.000 s unreliable (load) (raw 1.00 s)", "not measured")


def test_a_positive_paired_start_up_is_printed_plainly_and_judged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    entry = startup_workload_2(tmp_path, monkeypatch, bare_import_s=0.75)
    assert "minus_import_torch" not in entry["chillfl_startup_run_experiment"]["chillfl[auto]"]
    out = capsys.readouterr().out
    assert "paired median: 0.25 s\n" in out and "unreliable" not in out and "{'status'" not in out
    rows = {target: (measured, verdict) for target, measured, _, verdict in gpu_targets.targets({"2": entry})}
    assert rows["W2 launch -> end of round 1 - import torch"] == ("0.250 s (raw 1.00 s)", "met")


def test_gpu_targets_reads_a_negative_difference_of_an_older_report_as_not_measured() -> None:
    start = {"status": "ok", "median_s": 2.0, "median_minus_import_torch_s": -7.49}  # before the mark existed
    rows = {target: verdict for target, _, _, verdict in gpu_targets.targets({"2": {"chillfl_startup_run_experiment": {"chillfl[auto]": start}}})}
    assert rows["W2 launch -> end of round 1 - import torch"] == "not measured"


def no_bound_report() -> dict[str, Any]:
    """A --no-bound workload 2 report of one measured mode: no ratios (and, here, no FLOP rate)."""
    mode = {"status": "ok", "s_per_round_min": 0.1, "s_per_round_median": 0.2, "peak_mb": 300.0, "first_round_end_s_median": 1.5,
            "ops": {"status": "ok", "ops_per_client_step": 11.4}}
    return {"workloads": {"2": {"workload": workload("2").to_dict(), "rounds_per_run": 3, "flops_per_round": 0, "modes": {"chillfl[auto]": mode}}}}


def test_a_skipped_bound_prints_a_dash_not_nan() -> None:
    table, md = run.fmt_table(no_bound_report()), run.markdown_table(no_bound_report())
    assert "nan" not in table and "nan" not in md
    row = next(ln for ln in table.splitlines() if ln.startswith("chillfl[auto]")).split()
    assert row[:7] == ["chillfl[auto]", "0.100", "0.200", "-", "300", "-", "1.50"]
    assert "| 2 | chillfl[auto] | 0.100 | 0.200 | - | 300 | - | 1.5 | - |" in md


def test_the_printed_table_and_the_md_name_their_columns_alike_and_the_docs_quote_those_names() -> None:
    # the console said "1st round end s" and "ops/client step", the .md "launch -> end of round 1 (s)", "aten ops / client step"
    header = next(ln for ln in run.fmt_table(no_bound_report()).splitlines() if ln.startswith("mode"))
    md_header = run.markdown_table(no_bound_report()).splitlines()[0]
    docs = (ROOT / "benchmarks" / "README.md").read_text() + (ROOT / "docs" / "performance.md").read_text()
    for name in ("launch -> end of round 1 (s)", "aten ops / client step"):
        assert name in header and name in md_header and f"`{name}`" in docs
    assert "1st round end" not in docs and "`ops/client step`" not in docs

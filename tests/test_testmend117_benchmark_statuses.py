"""run_workload's last pass on a measured mode and a never-launched one, with the measurement stubbed: the fast-loop
twin of test_benchmarks' end-to-end case (slow: a real subprocess and the round FLOP count, ~28 s on 2 loaded vCPUs).

That pass once took ``dead[name]`` as setdefault's default, evaluated for every mode, so a measured mode (not in
``dead``) ended the workload with a KeyError. What is checked is the statuses, so the subprocess's numbers are fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import run
from test_benchmarks import blazefl_missing_case


def test_a_measured_and_a_never_launched_mode_both_get_their_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[list[str]] = []

    def measure(cmd: list[str], *args: Any, **kwargs: Any) -> run.Measured:  # one round, ending 1 s after the loop's start
        launched.append(cmd)
        return run.Measured(0, 1.0, 1.0, 1.0, {"t_loop_start": 0.0, "round_end": [1.0]})

    monkeypatch.setattr(run, "measure", measure)
    monkeypatch.setattr(run, "round_flops", lambda w: 1e9)
    entry = run.run_workload(*blazefl_missing_case(tmp_path))
    statuses = {name: result["status"] for name, result in entry["modes"].items()}
    assert statuses == {"compute_bound": "ok", "blazefl[serial]": "not available: blazefl (not installed here)"}
    assert len(launched) == 1  # the compute bound alone: blazefl's peer is missing
    assert entry["modes"]["compute_bound"]["s_per_round_median"] == 1.0  # the one round, 1.0 - 0.0

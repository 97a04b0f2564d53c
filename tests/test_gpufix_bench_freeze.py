"""The benchmark's chillfl worker freezes its imports out of the cyclic GC as the ``chillfl`` command does, so that its
start-up timing stands for ``chillfl run``'s (since 83e6198a ``import chillfl`` itself freezes nothing)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

from workloads import data_dir, workload, write_data  # noqa: E402


@pytest.mark.parametrize("api", ["run_experiment", "loop"])
def test_the_chillfl_worker_freezes_its_imports_as_the_command_does(tmp_path: Path, api: str) -> None:
    w = dataclasses.replace(workload("2"), num_clients=4, samples_per_client=20, clients_per_round=2)  # workload 2, tiny
    folder = data_dir(tmp_path, w.num_samples, 0)
    write_data(folder, w.num_samples, 0)
    clock = tmp_path / "clock.json"
    spec = {"workload": w.to_dict(), "data": str(folder), "rounds": 1, "seed": 0, "variant": "auto", "api": api, "device": "cpu",
            "clock": str(clock)}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCHMARKS), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, str(BENCHMARKS / "mode_chillfl.py"), str(tmp_path / "spec.json")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    noted = json.loads(clock.read_text())
    assert len(noted["round_end"]) == 1 and "error" not in noted
    assert noted["gc_frozen"] > 10_000  # torch's import-time objects (the command's test: tests/test_procfix_gc.py)

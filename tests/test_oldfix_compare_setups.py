"""A comparison's records of an older chillfl, or of two setups: a ``sweep.json`` without a code digest warns on resume
(nothing can say the code is the same), a table of runs that ran on two setups says which in a line atop ``table.md``,
and ``chillfl compare FOLDER/config.toml`` of an older comparison (its flags in ``sweep.json`` alone) names them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import chillfl.runner as runner
import chillfl.sweeps.run as sweep
from chillfl.cli import main
from chillfl.environment import environment
from resume_cases import SigintAfter

ARGS = ["--grid", "temperature=1,0.5", "-q", "model.name=mlp", "model.hidden=[8]", "federation.num_clients=4", "federation.clients_per_round=2",
        "federation.rounds=2", "eval.clients=none", "name=sw"]


def _stopped_comparison(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 2-run comparison whose second run stops after round 1, on torch "1.0" (as its records say): its ``.partial``."""
    real_run = sweep.run_experiment
    calls = [0]

    def run_experiment(cfg: Any, **kw: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            kw["callbacks"] = [SigintAfter(1)]
        return real_run(cfg, **kw)

    with monkeypatch.context() as patched:
        patched.setattr(sweep, "run_experiment", run_experiment)
        patched.setattr(runner, "environment", lambda device: {**environment(device), "torch": "1.0"})
        config = tmp_path / "sw.toml"
        config.write_text("")
        assert main(["compare", str(config), *ARGS, f"out_dir={tmp_path}"]) == 130
    return tmp_path / "sw-compare.partial"


def test_a_comparison_resumed_across_setups_says_which_runs_span_two(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    partial = _stopped_comparison(tmp_path, monkeypatch)
    record = json.loads((partial / "sweep.json").read_text())
    del record["made_with"]["code_sha256"]  # as an older chillfl's record
    (partial / "sweep.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["resume", str(partial), "-q"]) == 0
    err = capsys.readouterr().err
    assert "chillfl's code, which its sweep.json does not record (written by an older chillfl)" in err
    stopped = "T0.5"  # the second run
    summary = json.loads((tmp_path / "sw-compare" / stopped / "summary.json").read_text())
    assert summary["resumed"] == [{"round": 1, "changed": {"torch": ["1.0", str(torch.__version__)]}}]
    first = next(line for line in (tmp_path / "sw-compare" / "table.md").read_text().splitlines() if "setup" in line)
    assert first.startswith("warning: this comparison was resumed with other code or torch than sweep.json's made_with")
    assert first.endswith(f"1 run spans two setups (resumed on another than they started on; summary.json's resumed): {stopped}")


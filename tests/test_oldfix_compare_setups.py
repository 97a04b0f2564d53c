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


def test_an_older_comparisons_config_names_the_flags_its_sweep_json_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its config.toml has an empty [variants] and [compare]: "give at least one key=v1,v2,..." alone left the reader to
    find what it ran."""
    folder = tmp_path / "cmp-compare"
    folder.mkdir()
    (folder / "config.toml").write_text('name = "cmp"\nseed = 0\n[variants]\n[compare]\n[tune]\n', encoding="utf-8")
    fixed = [{"label": f"T={t:g}", "overrides": {"temperature": {"policy": "fixed", "value": t}}, "temperature": t, "lr_scale": 1.0,
              "short": f"T{t:g}", "tune": {}, "own": False} for t in (1.0, 0.25)]
    record = {"format": 1, "resumable": True, "reference": None, "variants": fixed,
              "options": {"seeds": [0, 1], "tune": {}, "controls": False, "select": "final"}}
    (folder / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert main(["compare", str(folder / "config.toml"), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("chillfl: error: --grid: ") and "kept this comparison's flags in its sweep.json (grid temperature=1.0,0.25; seeds 0,1; tune none)" in err
    assert f"chillfl compare {folder / 'config.toml'} --grid temperature=1.0,0.25 --seeds 0,1` runs it again" in err
    partial = folder.rename(tmp_path / "cmp-compare.partial")
    assert main(["compare", str(partial / "config.toml")]) == 2
    assert f"`chillfl resume {partial}` goes on with it, or" in capsys.readouterr().err


def test_variants_no_grid_makes_are_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "cmp-compare"
    folder.mkdir()
    (folder / "config.toml").write_text('name = "cmp"\n', encoding="utf-8")
    variants = [{"label": "fast", "overrides": {"client": {"lr": 0.1}}}, {"label": "prox", "overrides": {"algorithm": {"name": "fedprox"}}}]
    record = {"format": 1, "resumable": True, "reference": "fast", "variants": variants, "options": {"seeds": [0], "tune": {}}}
    (folder / "sweep.json").write_text(json.dumps(record), encoding="utf-8")
    assert main(["compare", str(folder / "config.toml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "(variants fast (client.lr=0.1); prox (algorithm.name=fedprox); seeds 0; tune none; reference fast): these as --grid flags" in err

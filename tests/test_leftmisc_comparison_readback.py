"""A comparison read back from its finished folder (``reproduce --resume``) counts the runs it holds and names those that
failed, as the comparison that ran them did (it said ``runs=0, failures=0``); a dry run's result says it planned its
runs and ran none (it said ``variants=[]``, a comparison of nothing)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import chillfl
from chillfl.config import load_config
from chillfl.sweeps.plan import CompareOptions, plan_runs
from chillfl.sweeps.record import read_compare, read_sweep
from chillfl.sweeps.run import run_compare

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1},
        "eval": {"client_split_size": 20}}


def test_a_finished_comparison_read_back_counts_its_runs_and_failures(tmp_path: Path) -> None:
    ran = chillfl.compare(config=TINY, grid={"algorithm.name": ["fedavg", "fedprox"]}, seeds=[0], out_dir=tmp_path, progress=False)
    assert ran.folder is not None and ran.runs == 2
    variants, options, reference = read_sweep(ran.folder)  # the comparison its folder records, as a resume plans it
    plan = plan_runs(load_config(ran.folder / "config.toml"), [], options, variants, reference)
    names = sorted(c.config.name for c in plan.cells)
    assert len(names) == 2 and all((ran.folder / name / "summary.json").is_file() for name in names)

    back = read_compare(ran.folder, plan)
    assert back.runs == 2 and back.failures == {}
    assert repr(back) == repr(ran)  # the same line as the comparison that ran

    # one run diverged: its folder is NAME.failed with the round in its failure.json, as a sweep leaves it
    diverged = ran.folder / names[-1]
    shutil.move(diverged, diverged.with_name(diverged.name + ".failed"))
    (diverged.with_name(diverged.name + ".failed") / "summary.json").unlink()
    (diverged.with_name(diverged.name + ".failed") / "failure.json").write_text(json.dumps({"round": 1}))
    back = read_compare(ran.folder, plan)
    assert back.runs == 2 and back.failures == {names[-1]: "diverged at round 1"}
    assert "runs=2, failures=1" in repr(back)


def test_a_dry_runs_result_says_it_planned_its_runs_not_a_comparison_of_none() -> None:
    config = chillfl.make_config(TINY)
    planned = run_compare(config, ["algorithm.name=fedavg,fedprox"], progress=False, options=CompareOptions(seeds=[0, 1]), dry_run=True)
    assert planned.runs == 4 and planned.planned
    shown = repr(planned)
    assert shown.startswith("Comparison(dry_run, planned=4 runs, ") and "variants=" not in shown and "\n" not in shown

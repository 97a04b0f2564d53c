"""A comparison's table says what its controls, its tuning grid and its failed seeds leave unsaid.

* ``controls = true`` controls the variants at one fixed T only: a chilled variant under a per-client policy (FedChill)
  keeps its step-size caveat, named.
* The controls' identity (magnitude only at lr = T = 1 at lr x 1/T) holds for SGD with momentum, not under Adam,
  clipping or weight decay: a "controls caveat" line names the field.
* A tuned variant whose chosen value is its grid's smallest or largest (of more than 2) is named: widen the grid.
* A row whose paired difference rests on fewer than 3 seeds (a seed failed) carries the few-seeds warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chillfl.config import RunConfig, load_config
from chillfl.report.caveats import controls_caveat, grid_edge_caveat, step_size_caveat
from chillfl.report.compare import _paired, _stat, few_seeds_warning, format_seed_table
from chillfl.sweeps import run as sweeps_run
from chillfl.sweeps.plan import CompareOptions, left_without_controls, plan_runs
from chillfl.sweeps.run import run_compare

TINY = {"dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 1,
        "eval.client_split_size": 10, "client.lr": 0.05}


def _config(tmp_path: Path, variants: str, overrides: dict[str, Any] | None = None) -> RunConfig:
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\nout_dir = "{tmp_path / "out"}"\n{variants}')
    return load_config(path, {**TINY, **(overrides or {})})


FEDCHILL = ('[variants."T=1"]\ntemperature = { policy = "none" }\n[variants."FedChill"]\ntemperature = { policy = "fedchill" }\n'
            '[variants."T=0.5"]\ntemperature = { policy = "fixed", value = 0.5 }\n')


def test_a_per_client_policy_left_without_controls_keeps_its_step_size_caveat(tmp_path: Path) -> None:
    config = _config(tmp_path, FEDCHILL)
    plan = plan_runs(config, [], CompareOptions(controls=True))
    assert left_without_controls(plan.variants, plan.configs) == ["FedChill"]  # T=0.5 got its controls, T=1 and the controls need none
    caveat = step_size_caveat(plan.configs, {}, True, ["FedChill"])
    assert caveat is not None and caveat.startswith("step-size caveat: the controls cover the variants at one fixed T; 'FedChill' sets T per client")
    assert "shared client.lr = 0.05" in caveat and "--tune client.lr=0.05,0.25,1" in caveat
    assert step_size_caveat(plan.configs, {}, True, []) is None  # every chilled variant controlled: the controls say it
    result = run_compare(config, [], options=CompareOptions(controls=True), progress=False, write=False)
    assert "step-size caveat: the controls cover the variants at one fixed T; 'FedChill' sets T per client or round, so it has none" in result.table


@pytest.mark.parametrize(("overrides", "named"), [
    ({"client.optimizer": "adam", "client.lr": 0.005}, "client.optimizer = 'adam'"),
    ({"client.clip_norm": 0.5}, "client.clip_norm = 0.5"),
    ({"client.weight_decay": 0.05}, "client.weight_decay = 0.05"),
    ({"client.lr_schedule": "cosine", "client.lr_min": 0.01}, "client.lr_min = 0.01"),
])
def test_controls_under_a_setting_that_breaks_their_identity_say_so(tmp_path: Path, overrides: dict[str, Any], named: str) -> None:
    config = _config(tmp_path, '[variants."T=1"]\ntemperature = { policy = "none" }\n', overrides)
    caveat = controls_caveat([config])
    assert caveat is not None and caveat.startswith("controls caveat: ") and f"not with {named} (" in caveat and "not as step-size matches" in caveat


def test_sgd_with_momentum_keeps_the_identity_and_no_caveat(tmp_path: Path) -> None:
    config = _config(tmp_path, '[variants."T=1"]\ntemperature = { policy = "none" }\n', {"client.momentum": 0.9, "client.nesterov": True})
    assert controls_caveat([config]) is None
    assert controls_caveat([]) is None  # no controls


def test_a_controlled_comparison_under_adam_prints_the_controls_caveat(tmp_path: Path) -> None:
    config = _config(tmp_path, '[variants."T=1"]\ntemperature = { policy = "none" }\n[variants."T=0.5"]\ntemperature = { policy = "fixed", value = 0.5 }\n',
                     {"client.optimizer": "adam", "client.lr": 0.005})
    result = run_compare(config, [], options=CompareOptions(controls=True), progress=False, write=False)
    assert "\n\ncontrols caveat: the step-size controls rest on magnitude only at lr" in result.table and "client.optimizer = 'adam'" in result.table
    plain = run_compare(config.with_overrides({"client.optimizer": "sgd", "client.lr": 0.05}), [], options=CompareOptions(controls=True),
                        progress=False, write=False)
    assert "controls caveat" not in plain.table


def test_the_grid_edge_caveat_names_each_variant_at_an_edge() -> None:
    grid = {"client.lr": [0.01, 0.05, 0.2]}
    caveat = grid_edge_caveat([("T=1", {"client.lr": 0.2}, grid), ("T=0.25", {"client.lr": 0.05}, grid), ("T=0.05", {"client.lr": 0.01}, grid)])
    assert caveat == ("grid-edge caveat: 'T=1' chose client.lr = 0.2, the largest of its grid; 'T=0.05' chose client.lr = 0.01, the smallest of its "
                      "grid: the best value may lie outside the grid; widen the grid to see (docs/comparisons.md).")
    assert grid_edge_caveat([("T=1", {"client.lr": 0.2}, {"client.lr": [0.01, 0.2]})]) is None  # 2 values: no inside to choose
    assert grid_edge_caveat([("T=1", {"client.lr": 0.05}, grid)]) is None
    assert grid_edge_caveat([("A", {"algorithm.name": "fedprox"}, {"algorithm.name": ["fedavg", "fedprox", "scaffold"]})]) is None  # not numeric


def test_a_tuned_comparison_prints_the_grid_edge_caveat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(tmp_path, '[variants."T=1"]\ntemperature = { policy = "none" }\n', {"eval.validation": 0.2})
    monkeypatch.setattr(sweeps_run, "select_point", lambda scores: len(scores) - 1)  # the selection itself is tests/test_tune.py's
    result = run_compare(config, [], options=CompareOptions(tune={"client.lr": [0.01, 0.02, 0.05]}), progress=False, write=False)
    assert "grid-edge caveat: 'T=1' chose client.lr = 0.05, the largest of its grid" in result.table


def _rows(seeds: list[int], failed: dict[str, str]) -> list[dict[str, Any]]:
    """T=1 and T=0.02 over ``seeds``; T=0.02 failed at the seeds in ``failed``."""
    base = [0.5 + 0.01 * s for s in seeds]
    acc = [None if str(s) in failed else 0.4 + 0.02 * s for s in seeds]
    common: dict[str, Any] = {"seeds": seeds, "rounds_to_target": [None] * len(seeds), "final_val_acc": None, "final_loss": None, "target": [None] * len(seeds)}
    return [{"variant": "T=1", "final_acc": _stat(base), "delta_acc": None, "diverged_seeds": [], "failed": {}, **common},
            {"variant": "T=0.02", "final_acc": _stat(acc), "delta_acc": _paired(acc, base), "diverged_seeds": [int(s) for s in failed], "failed": failed, **common}]


def test_a_row_whose_difference_rests_on_two_seeds_warns() -> None:
    table = format_seed_table(_rows([0, 1, 2], {"0": "diverged at round 1"}), "T=1", "T=1", None, "final", 0.0)
    warnings = [line for line in table.splitlines() if line.startswith("warning:")]
    assert warnings == [f"{few_seeds_warning(2)} (the diff of 'T=0.02' pairs 2 of the 3 seeds: the others failed)"]
    assert "| 2/2 |" in table
    assert "warning:" not in format_seed_table(_rows([0, 1, 2], {}), "T=1", "T=1", None, "final", 0.0)
    one = format_seed_table(_rows([0, 1, 2], {"0": "diverged at round 1", "1": "diverged at round 2"}), "T=1", "T=1", None, "final", 0.0)
    assert f"{few_seeds_warning(1)} (the diff of 'T=0.02' pairs 1 of the 3 seeds: the others failed)" in one


def test_a_diverging_loss_is_written_in_exponent_form() -> None:
    """A loss of 2.7e+17 was printed as '272821941800835168.000 ± 472541461671592704.000'."""
    from chillfl.report.compare import _pm, fixed

    assert _pm({"mean": 2.728e17, "std": 4.725e17}, 1.0, 3) == "2.728e+17 ± 4.725e+17"
    assert _pm({"mean": 0.279, "std": 0.044}, 1.0, 3) == "0.279 ± 0.044"  # ordinary cells as before
    assert fixed(-1.5e7, 2, "+") == "-1.50e+07" and fixed(999999.0, 1) == "999999.0"

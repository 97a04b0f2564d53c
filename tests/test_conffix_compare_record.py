"""A comparison folder's ``config.toml`` reruns the comparison that ran: the flags' (or keywords') grid, seeds,
tuning grid, selection rule and controls are recorded in its ``[variants]``, ``[compare]`` and ``[tune]``.

It held the file alone: ``chillfl compare cfg.toml --seeds 0,1 --tune client.momentum=0,0.5`` wrote empty
``[compare]`` and ``[tune]`` tables, so rerunning ``NAME-compare/config.toml`` ran one seed and no tuning.
"""

from __future__ import annotations

import json
from chillfl.config import tomllib  # tomli on Python 3.10
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.config import config_from_dict, load_config
from chillfl.storage.results import to_toml
from chillfl.sweeps.plan import CompareOptions, Plan, parse_grid, plan_runs
from chillfl.sweeps.record import comparison_toml

BASE: dict[str, Any] = {"name": "g", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp"}, "eval": {"validation": 0.2},
                        "federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}}


def _unnamed(plan: Plan) -> list[dict[str, Any]]:
    """Each run's config less its folder name, in run order."""
    return [{k: v for k, v in c.config.to_dict().items() if k != "name"} for c in plan.cells]


def _replanned(tmp_path: Path, config_data: dict[str, Any], grid: list[str], options: CompareOptions,
               reference: str | None = None) -> tuple[Plan, Plan, dict[str, Any]]:
    config = config_from_dict(config_data)
    plan = plan_runs(config, grid, options, reference=reference)
    saved = tmp_path / "config.toml"
    saved.write_text(comparison_toml(config, plan))
    return plan, plan_runs(load_config(saved), []), tomllib.loads(saved.read_text())


@pytest.mark.parametrize(("extra", "grid", "options", "reference", "same_names"), [
    ({}, [], CompareOptions(seeds=[0, 1], tune={"client.momentum": [0, 0.5]}, select="best"), None, True),
    ({}, [], CompareOptions(seeds=[0]), None, True),  # the config's own seed: only the flag made it a comparison
    ({"variants": {"a": {"client.lr": 0.1}, "b": {"client.lr": 0.05}}}, [], CompareOptions(seeds=[3], tune={"client.momentum": [0, 0.5]}), "b", True),
    ({"variants": {"old": {"client.lr": 0.3}}}, ["client.lr=0.05,0.1", "temperature=1,0.5"], CompareOptions(seeds=[0, 1], controls=True), None, False),
    ({"compare": {"seeds": [0, 1], "controls": True}, "variants": {"T=0.5": {"temperature": {"policy": "fixed", "value": 0.5}}}}, [],
     CompareOptions(controls=False), None, True),
])
def test_the_recorded_config_plans_the_same_runs(tmp_path: Path, extra: dict[str, Any], grid: list[str], options: CompareOptions,
                                                 reference: str | None, same_names: bool) -> None:
    plan, again, saved = _replanned(tmp_path, {**BASE, **extra}, grid, options, reference)
    assert [v.label for v in again.variants] == [v.label for v in plan.variants]
    assert (again.reference.label, again.baseline.label) == (plan.reference.label, plan.baseline.label)
    assert again.options == plan.options
    assert _unnamed(again) == _unnamed(plan)
    if same_names:
        assert [c.config.name for c in again.cells] == [c.config.name for c in plan.cells]
    if grid:  # the grid's rows replaced the file's [variants]; the controls are a flag, not rows
        assert list(saved["variants"]) == [v.label for v in parse_grid(grid)]
        assert saved["compare"]["controls"] is True


def test_a_config_driven_comparison_records_its_file_as_it_was(tmp_path: Path) -> None:
    data = {**BASE, "compare": {"seeds": [0, 1]}, "variants": {"a": {"client.lr": 0.1}}}
    _, _, saved = _replanned(tmp_path, data, [], CompareOptions())
    assert saved["compare"] == {"seeds": [0, 1]} and saved["tune"] == {} and saved["variants"] == {"a": {"client.lr": 0.1}}


def _metrics(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """Each run's metrics.jsonl, by run folder name, less any timing."""
    out = {}
    for path in sorted(folder.glob("*/metrics.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        out[path.parent.name] = [{k: v for k, v in row.items() if not (k.endswith("_s") or "time" in k)} for row in rows]
    return out


def _planned_lines(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    assert main(argv) == 0
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith("# compare") or line.startswith("#  ")]


def test_rerunning_the_folders_config_reruns_the_comparison(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cmp.toml"
    config.write_text(to_toml({**BASE, "out_dir": str(tmp_path / "D")}))
    flags = ["--seeds", "0,1", "--tune", "client.momentum=0,0.5"]
    planned = _planned_lines(capsys, ["compare", str(config), *flags, "--dry-run"])
    assert main(["compare", str(config), *flags]) == 0
    saved = tmp_path / "D" / "g-compare" / "config.toml"
    assert _planned_lines(capsys, ["compare", str(saved), "--dry-run"]) == planned
    assert main(["compare", str(saved), "--out", str(tmp_path / "E")]) == 0
    first, second = _metrics(tmp_path / "D" / "g-compare"), _metrics(tmp_path / "E" / "g-compare")
    assert len(first) == 4 and first == second


def test_the_python_apis_grid_seeds_and_tune_are_recorded(tmp_path: Path) -> None:
    import chillfl

    result = chillfl.compare(config={**BASE, "out_dir": str(tmp_path)}, grid={"client.lr": [0.05, 0.1]}, seeds=[0], tune={"client.momentum": [0, 0.5]},
                             progress=False)
    assert result.folder is not None
    saved = tomllib.loads((result.folder / "config.toml").read_text())
    assert saved["variants"] == {"client.lr=0.05": {"client.lr": 0.05}, "client.lr=0.1": {"client.lr": 0.1}}
    assert saved["compare"] == {} and saved["tune"] == {"client.momentum": [0.0, 0.5]}  # seed 0 is the config's own


@pytest.mark.parametrize(("keywords", "variants", "field", "key"), [
    ({"grid": {"partition.shard_size": [None, 25]}}, {}, "grid", "partition.shard_size"),
    ({"tune": {"partition.shard_size": [None, 25]}}, {}, "tune", "partition.shard_size"),
    ({}, {"a": {"tune": {"partition.shard_size": [None, 25]}}, "b": {}}, "variants", "a.tune.partition.shard_size"),
    ({}, {"a": {"partition.shard_size": None}, "b": {}}, "variants", "a.partition.shard_size"),
])
def test_a_none_the_folder_cannot_record_is_one_line(tmp_path: Path, keywords: dict[str, Any], variants: dict[str, Any], field: str,
                                                     key: str) -> None:
    """TOML has no null: a None in ``tune=`` (or a variant's own tune) crashed the folder's write with a tomli_w
    traceback, and one in ``grid=`` (or a variant's row) was dropped from the row, so rerunning the folder's
    config.toml ran the option's default under that label."""
    import chillfl
    from chillfl.errors import ConfigError

    config = {**BASE, "out_dir": str(tmp_path), "partition": {"name": "shards"}, **({"variants": variants} if variants else {})}
    with pytest.raises(ConfigError) as err:
        chillfl.compare(config=config, progress=False, **keywords)
    assert err.value.field == field and key in err.value.message and "TOML has no null" in err.value.message
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_the_dry_run_prints_the_config_the_folder_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The dry run's TOML and the folder's config.toml were written by two functions that disagreed (``--reference``
    missing from the dry run, ``--seeds 0`` only in it): one writer now, so the dry run is what the folder will hold."""
    config = tmp_path / "c.toml"
    config.write_text(to_toml({**BASE, "out_dir": f"{tmp_path.as_posix()}/out"}))
    flags = ["--grid", "client.lr=0.05,0.1", "--reference", "client.lr=0.1", "--seeds", "0", "-q"]
    assert main(["compare", str(config), *flags, "--dry-run"]) == 0
    printed = "".join(line + "\n" for line in capsys.readouterr().out.splitlines() if not line.startswith("#"))
    assert main(["compare", str(config), *flags]) == 0
    saved = (tmp_path / "out" / "g-compare" / "config.toml").read_text()  # its comment lines: tests/test_leftfix_compare_unset.py
    assert printed == "".join(line + "\n" for line in saved.splitlines() if not line.startswith("#"))
    assert tomllib.loads(printed)["compare"]["reference"] == "client.lr=0.1"

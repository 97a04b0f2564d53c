"""The step-size caveat printed with comparisons of temperatures at one shared lr; the test-set caveat; saved sub-run configs."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from chillfl.config import load_config
from chillfl.experiments import resolve_config
from chillfl.report.caveats import step_size_caveat, other_test_rows_caveat
from chillfl.sweeps.plan import apply_variant, parse_grid, variants_from_config
from chillfl.sweeps.run import run_compare

TINY = {"dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 2, "eval.client_split_size": 10}


def _variant_configs(name: str) -> list:
    config = load_config(resolve_config(name), {})
    return [apply_variant(config, v) for v in variants_from_config(config)]


def test_bundled_temperature_tables_at_one_lr_carry_the_caveat() -> None:
    for name in ("flexchill/table4-digits", "flexchill/table7-scaffold-digits", "fedchill/table4-digits"):
        caveat = step_size_caveat(_variant_configs(name), {}, controls=False)
        assert caveat is not None and "--controls" in caveat and "--tune client.lr=" in caveat, name


def test_no_caveat_when_tuned_controlled_or_one_temperature() -> None:
    configs = _variant_configs("flexchill/table4-digits")
    assert step_size_caveat(configs, {"client.lr": [0.01, 0.1]}, controls=False) is None
    assert step_size_caveat(configs, {}, controls=True) is None
    assert step_size_caveat(_variant_configs("pa3fed/table2-h0.1"), {}, controls=False) is None  # aggregators, all at T = 1


def test_no_caveat_when_the_lr_differs_between_variants() -> None:
    configs = _variant_configs("flexchill/table4-digits")
    configs[0] = configs[0].with_overrides({"client.lr": 0.2})
    assert step_size_caveat(configs, {}, controls=False) is None


def test_compare_prints_the_caveat_and_saved_configs_name_the_final_folder(tmp_path) -> None:
    path = tmp_path / "t.toml"
    path.write_text(f'name = "t"\nout_dir = "{tmp_path / "out"}"\n[variants."T=1"]\ntemperature = {{ policy = "none" }}\n'
                    '[variants."T=0.5"]\ntemperature = { policy = "fixed", value = 0.5 }\n')
    result = run_compare(load_config(path, {"client.lr": 0.05, **TINY}), [], progress=False)
    assert "step-size caveat: every variant trains at one shared client.lr = 0.05" in result.table
    assert "step-size caveat" in (result.folder / "table.md").read_text()
    saved = sorted(result.folder.glob("*/config.toml"))
    assert len(saved) == 2
    for p in saved:
        assert tomllib.loads(p.read_text())["out_dir"] == str(result.folder)


def test_variants_scored_on_other_test_rows_carry_the_test_set_caveat(tmp_path) -> None:
    """``--grid eval.validation=0,0.5`` scored one variant on the whole test set and the other on its other half, and printed
    their difference "paired per seed" with nothing saying the samples differ."""
    base = load_config(resolve_config("demo"), {"out_dir": str(tmp_path / "out"), **TINY})
    configs = [apply_variant(base, v) for v in parse_grid(["eval.validation=0,0.5"])]
    caveat = other_test_rows_caveat(configs)
    assert caveat is not None and caveat.startswith("test-set caveat: the variants differ in eval.validation,") and "same samples" in caveat
    both = [apply_variant(base, v) for v in parse_grid(["dataset.name=digits,mnist1d", "eval.validation=0.1,0.2"])]
    assert "differ in dataset and eval.validation," in (other_test_rows_caveat(both) or "")
    assert other_test_rows_caveat(_variant_configs("flexchill/table4-digits")) is None  # temperatures: one test set
    assert other_test_rows_caveat([apply_variant(base, v) for v in parse_grid(["partition.alpha=0.1,1.0"])]) is None  # the partition moves no test row


def test_no_caveat_when_every_variant_tunes_its_lr_in_its_own_grid(tmp_path) -> None:
    """Each variant's own grid tunes client.lr (no shared grid): the caveat said every variant trained at the one shared lr."""
    path = tmp_path / "t.toml"
    path.write_text('name = "t"\n[eval]\nvalidation = 0.2\n[variants."T=1"]\ntemperature = { policy = "none" }\ntune = { "client.lr" = [0.05, 0.2] }\n'
                    '[variants."T=0.5"]\ntemperature = { policy = "fixed", value = 0.5 }\ntune = { "client.lr" = [0.05, 0.2] }\n')
    result = run_compare(load_config(path, {"out_dir": str(tmp_path / "out"), **TINY}), [], progress=False, write=False)
    assert "| T=0.5 | client.lr=" in result.table and "step-size caveat" not in result.table

"""A variant's own tuning grid (``[variants.LABEL.tune]``): a method's own hyperparameter tuned on validation for it alone.

A shared ``[tune]`` grid can only hold options every variant has; FedProx's ``mu`` or FedBABU's ``finetune_lr`` were
left at their defaults while FedAvg's lr was tuned, which is not a fair comparison.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chillfl.config import config_from_dict
from chillfl.errors import ConfigError
from chillfl.sweeps.plan import plan_runs
from chillfl.sweeps.record import read_sweep
from chillfl.sweeps.run import run_compare


def _config(tmp_path: Path, **variants: Any) -> dict[str, Any]:
    return {
        "name": "own", "out_dir": str(tmp_path / "out"), "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]},
        "federation": {"num_clients": 4, "rounds": 2}, "eval": {"client_split_size": 20, "validation": 0.2},
        "tune": {"client.lr": [0.05, 0.2]},
        "variants": variants or {"FedAvg": {}, "FedProx": {"algorithm": {"name": "fedprox"}, "tune": {"algorithm.mu": [0.001, 0.1]}}},
    }


def test_a_variants_own_grid_is_crossed_with_the_shared_one_for_it_alone(tmp_path: Path) -> None:
    plan = plan_runs(config_from_dict(_config(tmp_path)), [])
    fedavg, fedprox = plan.variants
    assert plan.points_of(fedavg) == [{"client.lr": 0.05}, {"client.lr": 0.2}]
    assert plan.points_of(fedprox) == [{"client.lr": 0.05, "algorithm.mu": 0.001}, {"client.lr": 0.05, "algorithm.mu": 0.1},
                                       {"client.lr": 0.2, "algorithm.mu": 0.001}, {"client.lr": 0.2, "algorithm.mu": 0.1}]
    assert [c.key for c in plan.cells] == [("FedAvg", 0, 0), ("FedAvg", 1, 0)] + [("FedProx", i, 0) for i in range(4)]
    assert [(c.config.client.lr, c.config.algorithm.get("mu")) for c in plan.cells[2:]] == [(0.05, 0.001), (0.05, 0.1), (0.2, 0.001), (0.2, 0.1)]
    assert "tune" not in fedprox.overrides and plan.tuned


@pytest.mark.parametrize(("variant", "field", "words"), [
    ({"algorithm": {"name": "fedprox"}, "tune": {"client.lr": [0.1]}}, "variants.P.tune.client.lr", "tuned by the shared [tune] grid already"),
    ({"algorithm": {"name": "fedprox"}, "tune": {"algorithm.mu": []}}, "variants.P.tune.algorithm.mu", "non-empty list"),
    ({"algorithm": {"name": "fedprox"}, "tune": [1]}, "variants.P.tune", "expected a table"),
    ({"tune": {"algorithm.mu": [0.1]}}, "variants.P.tune.algorithm.mu", "unknown option"),  # FedAvg has no mu: refused before any run, named where it was written
])
def test_a_bad_own_grid_is_one_line_naming_the_variant(tmp_path: Path, variant: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        run_compare(config_from_dict(_config(tmp_path, P=variant)), [], progress=False)
    assert err.value.field == field and words in err.value.message, err.value
    assert not (tmp_path / "out").exists()


def test_a_shared_grid_key_that_fails_for_a_variant_overriding_nothing_names_that_variant(tmp_path: Path) -> None:
    """``[variants.Plain]`` overrides nothing, but it is a declared variant: the shared key's error names it, on the
    field where the file writes the key (``tune.<key>``, not ``variants.Plain.tune.<key>``, which the file has not)."""
    config = _config(tmp_path, Plain={}, FT={"algorithm": {"name": "fedavg_ft"}})
    config["tune"] = {"algorithm.finetune_lr": [0.1, 0.3]}  # an option of FedAvg-FT's, not of Plain's FedAvg
    with pytest.raises(ConfigError) as err:
        run_compare(config_from_dict(config), [], progress=False)
    assert err.value.field == "tune.algorithm.finetune_lr" and "unknown option" in err.value.message, err.value
    assert err.value.message.endswith("(for variant Plain)")
    assert not (tmp_path / "out").exists()


def test_the_config_itself_as_its_one_variant_keeps_the_configs_field(tmp_path: Path) -> None:
    """No ``[variants]``: the config is the comparison's one variant, and its error is the config's own field."""
    config = _config(tmp_path)
    del config["variants"]
    config["tune"] = {"algorithm.mu": [0.1, 0.3]}
    with pytest.raises(ConfigError) as err:
        run_compare(config_from_dict(config), [], progress=False)
    assert err.value.field == "tune.algorithm.mu" and "unknown option" in err.value.message, err.value


def test_the_own_grid_is_tuned_on_validation_reported_and_recorded(tmp_path: Path) -> None:
    result = run_compare(config_from_dict(_config(tmp_path)), [], progress=False)
    fedavg, fedprox = result.rows
    assert set(fedavg["tuned"]) == {"client.lr"} and set(fedprox["tuned"]) == {"client.lr", "algorithm.mu"}
    scores = fedprox["validation_scores"]
    assert len(scores) == 4 and len(fedavg["validation_scores"]) == 2
    points = [(0.05, 0.001), (0.05, 0.1), (0.2, 0.001), (0.2, 0.1)]
    assert (fedprox["tuned"]["client.lr"], fedprox["tuned"]["algorithm.mu"]) == points[scores.index(max(scores))]  # the best on validation
    table = result.table.splitlines()
    assert any(line.startswith("tuned per variant") and line.endswith("client.lr in {0.05, 0.2}; FedProx also algorithm.mu in {0.001, 0.1}") for line in table)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table[table.index("| variant | client.lr=0.05 | client.lr=0.2 |"):]}
    assert rows["FedProx, algorithm.mu=0.001"].endswith(f"| {100 * scores[0]:.2f} | {100 * scores[2]:.2f} |")
    assert rows["FedProx, algorithm.mu=0.1"].endswith(f"| {100 * scores[1]:.2f} | {100 * scores[3]:.2f} |")
    folder = tmp_path / "out" / "own-compare"
    assert json.loads((folder / "sweep.json").read_text())["variants"][1]["tune"] == {"algorithm.mu": [0.001, 0.1]}
    variants, _, _ = read_sweep(folder)  # what `chillfl resume` rebuilds the comparison from
    assert variants[1].tune == {"algorithm.mu": [0.001, 0.1]} and variants[0].tune == {}


def test_a_command_line_grid_that_tunes_a_variants_own_key_is_refused(tmp_path: Path) -> None:
    """``--tune`` replaces the config's shared grid: a key it shares with a variant's own grid would be tuned twice."""
    from chillfl.sweeps.plan import CompareOptions

    with pytest.raises(ConfigError) as err:
        plan_runs(config_from_dict(_config(tmp_path)), [], options=CompareOptions(tune={"algorithm.mu": [0.01]}))
    assert err.value.field == "variants.FedProx.tune.algorithm.mu" and "(--tune)" in err.value.message


@pytest.mark.parametrize("spelling", [{"client": {"lr": 0.1}}, {"client.lr": 0.1}], ids=["table", "dotted"])
def test_a_variant_setting_a_key_the_shared_grid_sweeps_is_refused(tmp_path: Path, spelling: dict[str, Any]) -> None:
    """The tuning point is applied after the variant: its lr never ran, and the table showed a row labelled with it
    (a grid over client.lr with --tune client.lr gave rows "client.lr=0.1" and "=0.3" with the same numbers)."""
    from chillfl.sweeps.plan import CompareOptions, parse_grid

    with pytest.raises(ConfigError) as err:
        plan_runs(config_from_dict(_config(tmp_path, A={}, B=spelling)), [])
    assert err.value.field == "variants.B.client.lr" and "swept by the shared tuning grid" in err.value.message
    config = config_from_dict({**_config(tmp_path), "variants": {}})
    with pytest.raises(ConfigError) as err:
        plan_runs(config, ["client.lr=0.1,0.3"], options=CompareOptions(tune={"client.lr": [0.05, 0.2]}))
    assert err.value.field == "client.lr" and err.value.message.endswith("(grid variant client.lr=0.1)")
    plan_runs(config, ["client.epochs=1,2"])  # another key: fine
    assert parse_grid(["client.lr=0.1,0.3"])  # and a grid over lr without tuning it


def test_grids_written_with_toml_dotted_keys_unquoted_are_the_quoted_ones(tmp_path: Path) -> None:
    """TOML reads ``client.lr = [...]`` unquoted as a nested table: ``[tune]`` refused it ("tune.client: expected a non-empty
    list"), and a variant's ``tune.algorithm.mu = [...]`` the same way, unless the key was quoted."""
    from chillfl.config import load_config

    head = f'name = "own"\nout_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n[federation]\nnum_clients = 4\nrounds = 2\n[eval]\nvalidation = 0.2\n'
    quoted = head + '[tune]\n"client.lr" = [0.05, 0.2]\n[variants.FedAvg]\n[variants.FedProx]\nalgorithm = { name = "fedprox" }\n[variants.FedProx.tune]\n"algorithm.mu" = [0.001, 0.1]\n'
    unquoted = head + '[tune]\nclient.lr = [0.05, 0.2]\n[variants.FedAvg]\n[variants.FedProx]\nalgorithm.name = "fedprox"\ntune.algorithm.mu = [0.001, 0.1]\n'
    plans = []
    for i, text in enumerate((quoted, unquoted)):
        path = tmp_path / f"c{i}.toml"
        path.write_text(text)
        plan = plan_runs(load_config(path), [])
        plans.append([plan.points_of(v) for v in plan.variants])
    assert plans[0] == plans[1] and len(plans[1][1]) == 4 and plans[1][1][0] == {"client.lr": 0.05, "algorithm.mu": 0.001}


@pytest.mark.parametrize(("tables", "field"), [
    ({"tune": {"client.lr": [0.1], "client": {"lr": [0.2]}}}, "tune.client.lr"),
    ({"variants": {"P": {"algorithm": {"name": "fedprox"}, "tune": {"algorithm.mu": [0.1]}, "tune.algorithm.mu": [0.2]}}}, "variants.P.tune.algorithm.mu"),
])
def test_a_grid_key_written_twice_is_refused(tmp_path: Path, tables: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        config_from_dict({**_config(tmp_path), **tables})
    assert err.value.field == field and "given twice" in err.value.message


@pytest.mark.parametrize(("tables", "field"), [
    ({"tune": {"temperature.value": [0.5, 0.25]}, "variants": {"A": {"temperature": {"policy": "fixed"}}}}, "tune.temperature.value"),
    ({"variants": {"A": {"temperature": {"policy": "fixed", "value": 0.5}, "tune": {"temperature.value": [0.5, 0.25]}}, "B": {}}}, "variants.A.tune.temperature.value"),
])
def test_controls_of_a_variant_whose_temperature_is_tuned_are_refused(tmp_path: Path, tables: dict[str, Any], field: str) -> None:
    """The lr control's x 1/T is the variant's table T: at the point T = 0.25 of a T = 0.5 variant it ran at lr x 2, not x 4."""
    config = {**_config(tmp_path), "compare": {"controls": True}, **tables}
    with pytest.raises(ConfigError) as err:
        plan_runs(config_from_dict(config), [])
    assert err.value.field == field and "step-size controls" in err.value.message
    config["compare"] = {}
    assert plan_runs(config_from_dict(config), []).variants  # without controls, tuning T is allowed


def test_an_own_grid_without_a_validation_split_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """No shared ``[tune]``, only a variant's own grid, and ``eval.validation = 0``: refused at once (it ran every run, then
    failed on selection and left ``own-compare.partial`` behind)."""
    config = _config(tmp_path)
    del config["tune"]
    config["eval"]["validation"] = 0.0
    with pytest.raises(ConfigError) as err:
        plan_runs(config_from_dict(config), [])
    assert err.value.field == "eval.validation"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("variant", "select", "field"), [
    ({"eval": {"validation": 0.0}}, "final", "variants.B.eval.validation"),
    ({"eval": {"clients": "none"}}, "local_final", "variants.B.eval.clients"),
])
def test_a_variant_without_what_the_rule_selects_on_is_refused_before_anything_runs(
    tmp_path: Path, variant: dict[str, Any], select: str, field: str,
) -> None:
    """The base config has a validation split; one variant turns it (or its clients' splits) off: that variant's runs record no
    ``val_acc`` (``local_val_acc``), and selection failed after every run ran, leaving ``own-compare.partial``."""
    config = _config(tmp_path, A={}, B=variant)
    config["compare"] = {"select": select}
    with pytest.raises(ConfigError) as err:
        plan_runs(config_from_dict(config), [])
    assert err.value.field == field, err.value
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("spelling", ['"client.lr" = [0.05, 0.2]', "client.lr = [0.05, 0.2]"])
def test_a_tune_override_replaces_the_axis_however_the_file_spelt_it(tmp_path: Path, spelling: str) -> None:
    """``tune.client.lr=[0.5]`` on a file whose grid quotes the key (the demo's ``"client.lr"``) set the nested spelling
    beside it, and the run was refused as giving ``tune.client.lr`` twice; it replaces the axis, the other axes stay."""
    from chillfl.config import load_config

    path = tmp_path / "c.toml"
    path.write_text(f'[dataset]\nname = "digits"\n[eval]\nvalidation = 0.2\n[tune]\n{spelling}\n"client.momentum" = [0.0, 0.9]\n')
    config = load_config(path, {"tune.client.lr": [0.5], "tune.algorithm.mu": [0.01]})
    assert config.tune == {"client.lr": [0.5], "client.momentum": [0.0, 0.9], "algorithm.mu": [0.01]}
    with pytest.raises(ConfigError) as err:
        load_config(path, {"tune.client.lr": 0.5})
    assert err.value.field == "tune.client.lr" and "non-empty list" in err.value.message


def test_an_override_replaces_a_variants_grid_axis_and_finds_a_name_with_dots(tmp_path: Path) -> None:
    """``variants.FedProx.tune.algorithm.mu=[...]`` replaces the axis the file wrote quoted (it was refused as giving
    the axis twice), and ``variants.<name>.<option>`` finds a variant whose name holds dots ("lr 0.1": it was split at
    them, "unknown key or section"), the longest name that fits; a new name still makes a new variant."""
    from chillfl.config import load_config

    path = tmp_path / "c.toml"
    path.write_text(f'name = "own"\nout_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n[federation]\nnum_clients = 4\n'
                    'rounds = 2\n[eval]\nvalidation = 0.2\n[tune]\n"client.lr" = [0.05, 0.2]\n[variants."lr 0.1"]\n'
                    '[variants."lr 0.1 b"]\n[variants.FedProx]\nalgorithm = { name = "fedprox" }\n[variants.FedProx.tune]\n'
                    '"algorithm.mu" = [0.001, 0.1]\n')
    config = load_config(path, {"variants.FedProx.tune.algorithm.mu": [0.5], "variants.lr 0.1 b.client.momentum": 0.3,
                                "variants.lr 0.1.client.epochs": 3, "variants.New.algorithm.name": "fedprox"})
    plan = plan_runs(config, [])
    points = {v.label: plan.points_of(v) for v in plan.variants}
    assert points["FedProx"] == [{"client.lr": 0.05, "algorithm.mu": 0.5}, {"client.lr": 0.2, "algorithm.mu": 0.5}]
    variants = config.variants
    assert variants["lr 0.1 b"]["client"] == {"momentum": 0.3} and variants["lr 0.1"]["client"] == {"epochs": 3}
    assert variants["New"]["algorithm"] == {"name": "fedprox"}


@pytest.mark.parametrize("item", ['variants.T=0.25.client.momentum=0.5', 'variants."T=0.25".client.momentum=0.5'], ids=["bare", "quoted"])
def test_an_override_finds_a_variant_whose_name_holds_an_equals_sign(item: str) -> None:
    """The demo's and the bundled tables' names hold "=" (``T=0.25``): the override was split at that "=" and refused
    ("variants.T: must be a table of overrides"), quoted as TOML quotes a key or not."""
    from chillfl.config import load_config, parse_overrides
    from chillfl.experiments import resolve_config

    config = load_config(resolve_config("flexchill/table4-digits"), parse_overrides([item]))
    assert config.variants["T=0.25"]["client"] == {"momentum": 0.5}
    assert all("client" not in v for label, v in config.variants.items() if label != "T=0.25")

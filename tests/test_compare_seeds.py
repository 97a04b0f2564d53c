"""``compare`` over seeds: seed parsing, step-size controls, rows and table on hand-worked numbers, and an end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import config_from_dict
from chillfl.errors import ConfigError
from chillfl.report.compare import CLIPPED_NOTE, build_rows, build_seed_rows, format_seed_table
from chillfl.sweeps.plan import CompareOptions, Variant, cell_config, parse_grid, parse_seeds, plan_runs, with_controls
from chillfl.sweeps.run import run_compare
from chillfl.runner import RunOutput


def test_parse_seeds() -> None:
    assert parse_seeds("0,1,2") == [0, 1, 2]
    assert parse_seeds("3-5, 9") == [3, 4, 5, 9]
    for bad in ("a", "1,1", "-1", ""):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)


def test_config_seeds_and_options_are_typed() -> None:
    assert config_from_dict({"compare": {"seeds": [0, 1], "controls": True, "select": "best"}}).compare["seeds"] == [0, 1]
    for table, field in (({"seeds": [0, "1"]}, "compare.seeds"), ({"seeds": []}, "compare.seeds"), ({"controls": 1}, "compare.controls"), ({"select": "last"}, "compare.select")):
        with pytest.raises(ConfigError, match=field):
            config_from_dict({"compare": table})


def test_controls_of_a_chilled_variant() -> None:
    # T = 0.05: lr x 1/T = lr x 20 at T = 1; magnitude-only and direction-only at T = 0.05; T = 1 gets none
    base = config_from_dict({"client": {"lr": 0.01}})
    variants = with_controls(base, parse_grid(["temperature=1,0.05"]))
    assert [v.label for v in variants] == [
        "T=1", "T=0.05", "T=1, lr x 20 (control of T=0.05)", "T=0.05 magnitude only", "T=0.05 direction only",
    ]
    lr_control = cell_config(base, variants[2], {}, seed=4, suffix=False)
    assert lr_control.client.lr == pytest.approx(0.2) and lr_control.temperature == {"policy": "none"} and lr_control.seed == 4
    mag = cell_config(base, variants[3], {}, seed=0, suffix=False)
    assert (mag.client.loss, mag.client.lr, mag.temperature["value"]) == ("magnitude_only", 0.01, 0.05)
    assert cell_config(base, variants[4], {}, seed=0, suffix=False).client.loss == "direction_only"
    # a tuned lr is scaled too: the control of lr = 0.05 at T = 0.05 runs at lr = 1.0
    tuned = cell_config(base, variants[2], {"client.lr": 0.05}, seed=1, suffix=True)
    assert tuned.client.lr == pytest.approx(1.0) and tuned.name == "T0.05-T1-lrx20-lr0.05-s1"


def test_a_variant_chilled_by_its_base_config_or_a_dotted_key_gets_its_controls_too() -> None:
    """Controls were given only to variants whose own ``temperature`` table set T: a grid over the lr of a config at
    T = 0.25, or a variant writing ``"temperature.value"``, compared a chilled method with no step-size control."""
    chilled = config_from_dict({"client": {"lr": 0.01}, "temperature": {"policy": "fixed", "value": 0.25}, "compare": {"controls": True}})
    planned = plan_runs(chilled, ["client.lr=0.01,0.1"]).variants
    assert [v.label for v in planned][:3] == ["client.lr=0.01", "client.lr=0.1", "T=1, lr x 4 (control of client.lr=0.01)"]
    assert [v.temperature for v in planned[:2]] == [0.25, 0.25] and len(planned) == 8  # 2 variants + 3 controls each
    dotted = config_from_dict({"compare": {"controls": True}, "variants": {
        "plain": {}, "chilled": {"temperature.policy": "fixed", "temperature.value": 0.5}}})
    plan = plan_runs(dotted, [])
    assert [(v.label, v.temperature) for v in plan.variants[:2]] == [("plain", 1.0), ("chilled", 0.5)]
    assert "T=1, lr x 2 (control of chilled)" in [v.label for v in plan.variants]
    assert (plan.reference.label, plan.baseline.label) == ("plain", "plain")  # the warmest (T = 1) sets the target


def test_planning_builds_each_variants_config_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_sweep built a chilled variant's config twice (to check it, then again for its controls), and plan_runs
    built every declared variant's once more for its cells: each variant is built once a plan, the runs unchanged."""
    from chillfl.sweeps import plan as planning

    base = config_from_dict({"client": {"lr": 0.01}, "eval": {"validation": 0.2}, "compare": {"controls": True}})
    grid, options = ["temperature=1,0.05"], CompareOptions(seeds=[0, 1], tune={"client.lr": [0.01, 0.1]})
    real = planning.apply_variant
    built: list[str] = []

    def counted(config: object, variant: Variant) -> object:
        built.append(variant.label)
        return real(config, variant)  # type: ignore[arg-type]

    monkeypatch.setattr(planning, "apply_variant", counted)
    variants, _ = planning.plan_sweep(base, grid, options)
    assert built == ["T=1", "T=0.05"]  # the two declared variants; their three controls are only labelled here
    built.clear()
    plan = planning.plan_runs(base, grid, options)
    assert sorted(built) == sorted(v.label for v in variants) and len(built) == 5  # 2 variants + T=0.05's 3 controls
    assert len(plan.cells) == 5 * 2 * 2  # x 2 tuning points x 2 seeds: each config built once, not once a run
    monkeypatch.setattr(planning, "apply_variant", real)
    expected = [cell_config(base, c.variant, plan.points_of(c.variant)[c.point], c.seed, suffix=True) for c in plan.cells]
    assert [c.config.to_dict() for c in plan.cells] == [e.to_dict() for e in expected]  # every run's config as built afresh


def _out(final: float, best: float, val: float, curve: list[float]) -> RunOutput:
    records = [{"round": i + 1, "global_acc": a} for i, a in enumerate(curve)]
    return RunOutput(None, records, {"final_global_acc": final, "best_global_acc": best, "final_val_acc": val, "final_global_loss": 1.0})


def test_a_comparison_builds_each_variants_config_once_its_table_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """tabulate built every variant's config again for its caveats, which the plan had built: a whole comparison
    (planned, checked, run, tabulated) builds each variant's config once, and the plan holds them as built afresh."""
    from chillfl.sweeps import plan as planning
    from chillfl.sweeps import run as sweeps_run

    base = config_from_dict({"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 4, "rounds": 2},
                             "eval": {"client_split_size": 20}, "compare": {"controls": True}})
    real = planning.variant_config
    built: list[str] = []

    def counted(config: object, label: str, overrides: dict) -> object:  # type: ignore[type-arg]
        built.append(label)
        return real(config, label, overrides)  # type: ignore[arg-type]

    def run_experiment(config: object, **_: object) -> RunOutput:  # no training: the table of made-up runs
        return _out(0.5, 0.5, 0.5, [0.4, 0.5])

    monkeypatch.setattr(planning, "variant_config", counted)
    monkeypatch.setattr(sweeps_run, "run_experiment", run_experiment)
    result = run_compare(base, ["temperature=1,0.05"], progress=False, write=False, options=CompareOptions(seeds=[0, 1]))
    labels = [row["variant"] for row in result.rows]
    assert len(labels) == 5 and built == labels  # T=1, T=0.05 and T=0.05's 3 controls: once each (tabulate: 10 before)
    built.clear()
    plain = base.with_overrides({"compare.controls": False})
    result = run_compare(plain, ["temperature=1,0.05"], progress=False, write=False, options=CompareOptions(seeds=[0, 1]))
    assert built == ["T=1", "T=0.05"] and "step-size caveat: every variant trains at one shared client.lr" in result.table  # read from the plan's configs
    built.clear()
    plan = plan_runs(base, ["temperature=1,0.05"], CompareOptions(seeds=[0, 1]))
    monkeypatch.setattr(planning, "variant_config", real)
    assert [c.to_dict() for c in plan.configs] == [planning.apply_variant(base, v).to_dict() for v in plan.variants]


def test_rows_and_table_over_three_seeds() -> None:
    # base T=1: final [0.80, 0.90, 0.70]; T=0.1: final [0.85, 0.88, 0.80]
    # paired diffs [0.05, -0.02, 0.10]: mean 0.043333, std 0.060277 (see test_stats), sign holds 2/3
    # T=1 accuracy: mean 0.8, std 0.1, half width 4.302653 * 0.1 / sqrt(3) = 0.248414 -> [55.16, 104.84] %, an accuracy past
    # 100 %: printed clipped to its range as [55.16, 100.00] and marked †, with the footnote; table.json keeps 1.048414
    # target at each seed = best of T=1 (reference) = [0.8, 0.9, 0.7]; T=0.1's curves reach it at rounds 2, never, 1
    base, chill = Variant("T=1", {}, 1.0), Variant("T=0.1", {}, 0.1)
    runs = {
        ("T=1", 0): _out(0.80, 0.80, 0.7, [0.5, 0.8]), ("T=1", 1): _out(0.90, 0.90, 0.7, [0.6, 0.9]), ("T=1", 2): _out(0.70, 0.70, 0.7, [0.6, 0.7]),
        ("T=0.1", 0): _out(0.85, 0.85, 0.8, [0.7, 0.85]), ("T=0.1", 1): _out(0.88, 0.88, 0.8, [0.8, 0.88]), ("T=0.1", 2): _out(0.80, 0.80, 0.8, [0.8, 0.8]),
    }
    rows = build_seed_rows([base, chill], runs, [0, 1, 2], base, base, None)
    t1, t01 = rows
    assert t1["final_acc"]["mean"] == pytest.approx(0.8) and t1["final_acc"]["std"] == pytest.approx(0.1)
    assert t1["final_acc"]["ci_low"] == pytest.approx(0.8 - 0.248414, abs=1e-6)
    assert t1["final_acc"]["ci_high"] == pytest.approx(0.8 + 0.248414, abs=1e-6) and t1["final_acc"]["range"] == [0.0, 1.0]
    assert t01["delta_acc"]["range"] == [-1.0, 1.0] and "range" not in t1["final_loss"]  # a loss has no upper bound
    assert t01["delta_acc"]["mean"] == pytest.approx(0.043333, abs=1e-6) and t01["delta_acc"]["sign_holds"] == 2
    assert t01["delta_acc"]["per_seed"] == pytest.approx([0.05, -0.02, 0.10])
    assert t01["rounds_to_target"] == [2, None, 1] and t1["rounds_to_target"] == [2, 2, 2]
    table = format_seed_table(rows, "T=1", "T=1", None, "final", 0.0)
    assert "| T=1 | 70.00 ± 0.00 | 80.00 ± 10.00 | [55.16, 100.00]† | +0.00 ± 0.00 | [+0.00, +0.00] | 0/3 | 1.000 ± 0.000 | 2.0 (3/3) |" in table
    assert table.count("†") == 2 and table.splitlines()[-2:] == ["", CLIPPED_NOTE]  # the mark, and one footnote under the table
    # T=0.1: 84.33 ± 4.04 -> half width 4.3027 * 0.040415 / sqrt(3) = 0.100398 -> [74.29, 94.37]: inside [0, 100], not marked
    assert "| [74.29, 94.37] |" in table
    assert "| T=0.1 | 80.00 ± 0.00 | 84.33 ± 4.04 |" in table and "| +4.33 ± 6.03 |" in table and "| 2/3 | 1.000 ± 0.000 | 1.5 (2/3) |" in table
    # a diverged seed: dropped from the statistics and named in the table
    runs[("T=0.1", 1)] = None
    rows = build_seed_rows([base, chill], runs, [0, 1, 2], base, base, None)
    assert rows[1]["diverged_seeds"] == [1] and rows[1]["delta_acc"]["n"] == 2
    assert "T=0.1 (seed 1: diverged)" in format_seed_table(rows, "T=1", "T=1", None, "final", 0.0)


TINY = [
    "dataset.name=digits", "federation.num_clients=4", "federation.rounds=2", "model.name=mlp", "eval.client_split_size=20",
]


def test_variants_share_partition_and_initial_model_at_each_seed(tmp_path: Path) -> None:
    # two labels with the same settings: identical metrics at each seed (same partition, same initial model);
    # different seeds give different metrics
    cfg = config_from_dict({
        "name": "same", "out_dir": str(tmp_path), "dataset": {"name": "digits"}, "model": {"name": "mlp"},
        "federation": {"num_clients": 4, "rounds": 2}, "eval": {"client_split_size": 20},
        "variants": {"a": {"client": {"momentum": 0.0}}, "b": {"client": {"momentum": 0.0, "weight_decay": 0.0}}},
    })
    result = run_compare(cfg, [], progress=False, write=False, options=CompareOptions(seeds=[0, 1]))
    a, b = result.rows
    assert a["final_acc"]["per_seed"] == b["final_acc"]["per_seed"]
    assert a["final_acc"]["per_seed"][0] != a["final_acc"]["per_seed"][1]
    assert b["delta_acc"]["per_seed"] == [0.0, 0.0]


def test_cli_compare_over_seeds_writes_table_and_bands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cmp.toml"
    config.write_text(f'name = "cmp"\nout_dir = "{tmp_path / "out"}"\n')
    assert main(["compare", str(config), "-q", *TINY, "--grid", "temperature=1,0.5", "--seeds", "0,1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seeds 0, 1 (n = 2)") and "| T=0.5 |" in out
    folder = tmp_path / "out" / "cmp-compare"
    rows = json.loads((folder / "table.json").read_text())
    assert [r["seeds"] for r in rows] == [[0, 1], [0, 1]] and len(rows[1]["delta_acc"]["per_seed"]) == 2
    assert (folder / "curves.png").stat().st_size > 0
    assert (folder / "differences.png").stat().st_size > 0  # T=0.5's paired difference from T=1
    assert not (folder / "local_curves.png").exists()  # [compare] local is not set
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == ["T0.5-s0", "T0.5-s1", "T1-s0", "T1-s1"]


def test_cli_tuning_needs_a_validation_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "cmp.toml"
    config.write_text(f'name = "cmp"\nout_dir = "{tmp_path / "out"}"\n')
    assert main(["compare", str(config), "-q", *TINY, "--grid", "temperature=1", "--tune", "client.lr=0.1,0.2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: eval.validation:")
    assert main(["compare", str(config), "-q", *TINY, "--grid", "temperature=1", "--seeds", "0,x"]) == 2
    assert capsys.readouterr().err.startswith("chillfl: error: --seeds:")
    assert not (tmp_path / "out").exists()


def test_runs_are_bounded_before_anything_runs(tmp_path: Path) -> None:
    # 11 variants x 1 point x 1000 seeds = 11000 runs > 10000
    cfg = config_from_dict({"out_dir": str(tmp_path / "out")})
    grid = ["temperature=" + ",".join(str(t) for t in range(1, 12))]
    with pytest.raises(ConfigError, match="11000 runs"):
        run_compare(cfg, grid, progress=False, options=CompareOptions(seeds=list(range(1000))))
    assert not (tmp_path / "out").exists()


def test_local_accuracy_columns_by_hand() -> None:
    # base local [0.60, 0.70, 0.80]; personalised local [0.90, 0.85, 0.95] -> diffs [0.30, 0.15, 0.15]:
    # mean 0.20, std sqrt(((0.1)^2 + 2 (0.05)^2) / 2) = sqrt(0.0075) = 0.086603, sign holds 3/3
    base, pers = Variant("FedAvg", {}, None), Variant("Ditto", {}, None)

    def out(local: float) -> RunOutput:
        return RunOutput(None, [{"round": 1, "global_acc": 0.5}], {"final_global_acc": 0.5, "best_global_acc": 0.5, "final_val_acc": 0.5,
                                                                  "final_global_loss": 1.0, "final_local_acc": local})

    runs = {("FedAvg", s): out(a) for s, a in enumerate([0.60, 0.70, 0.80])} | {("Ditto", s): out(a) for s, a in enumerate([0.90, 0.85, 0.95])}
    rows = build_seed_rows([base, pers], runs, [0, 1, 2], base, base, None)
    d = rows[1]["delta_local_acc"]
    assert d["per_seed"] == pytest.approx([0.30, 0.15, 0.15]) and d["mean"] == pytest.approx(0.20) and d["std"] == pytest.approx(0.086603, abs=1e-6)
    assert d["sign_holds"] == 3 and rows[0]["final_local_acc"]["mean"] == pytest.approx(0.70)
    plain = format_seed_table(rows, "FedAvg", "FedAvg", None, "final", 0.0)
    table = format_seed_table(rows, "FedAvg", "FedAvg", None, "final", 0.0, local=True)
    assert "local acc" not in plain and "| local acc % | local diff (paired) | local diff 95 % CI |" in table
    assert "| 0/3 | 90.00 ± 5.00 | +20.00 ± 8.66 | [-1.51, +41.51] |" in table  # half width 4.3027 * 0.086603 / sqrt(3)


@pytest.mark.parametrize(("select", "column"), [("final", "60.00 ± 14.14"), ("best", "90.00 ± 14.14"),
                                                ("local_final", "40.00 ± 14.14"), ("local_best", "70.00 ± 14.14")])
def test_the_val_acc_column_is_the_number_the_rule_selected_on(select: str, column: str) -> None:
    """With ``select = "best"`` the column showed the final round's validation accuracy (60 %), while the point was chosen on,
    and the table of every point shows, the best round's (90 %). Final val [0.5, 0.7], best [0.8, 1.0] (sample std 0.1414); local 0.2 lower."""
    variant = Variant("FedAvg", {}, None)

    def out(val: float, best: float) -> RunOutput:
        return RunOutput(None, [{"round": 1, "global_acc": 0.5}], {"final_global_acc": 0.5, "best_global_acc": 0.5, "final_global_loss": 1.0,
                                                                  "final_val_acc": val, "best_val_acc": best,
                                                                  "final_local_val_acc": val - 0.2, "best_local_val_acc": best - 0.2})

    runs = {("FedAvg", 0): out(0.5, 0.8), ("FedAvg", 1): out(0.7, 1.0)}
    rows = build_seed_rows([variant], runs, [0, 1], variant, variant, {"FedAvg": ({"client.lr": 0.1}, [0.9])})
    table = format_seed_table(rows, "FedAvg", "FedAvg", {"client.lr": [0.1]}, select, 0.2)
    assert f"| FedAvg | client.lr=0.1 | {column} | 50.00 ± 0.00 |" in table, table


def test_a_variant_that_sets_its_own_seed_is_refused(tmp_path: Path) -> None:
    """``--grid seed=1,2`` or ``[variants.B] seed = 7`` was dropped for the comparison's seed: two identical runs printed as a
    comparison of seeds, or a variant read as on other data while paired with the baseline at the same seed."""
    with pytest.raises(ConfigError) as err:
        plan_runs(config_from_dict({"out_dir": str(tmp_path / "out")}), ["seed=1,2"])
    assert err.value.field == "seed" and "comparison's seeds" in err.value.message and "(grid variant seed=1)" in err.value.message
    with pytest.raises(ConfigError) as err:
        config_from_dict({"out_dir": str(tmp_path / "out"), "variants": {"A": {}, "B": {"seed": 7}}})
    assert err.value.field == "variants.B.seed" and "--seeds" in err.value.message
    assert not (tmp_path / "out").exists()


def test_a_variant_whose_every_tuning_point_failed_says_none_was_chosen() -> None:
    """Every point diverged at a seed or more (scores -inf): the table named the grid's first point as "tuned", as if chosen."""
    base, broken = Variant("FedAvg", {}, None), Variant("Broken", {}, None)
    runs = {("FedAvg", 0): _out(0.8, 0.8, 0.7, [0.8]), ("Broken", 0): None}
    chosen = {"FedAvg": ({"client.lr": 0.1}, [0.5, 0.7]), "Broken": ({"client.lr": 0.05}, [float("-inf"), float("-inf")])}
    rows = build_seed_rows([base, broken], runs, [0], base, base, chosen)
    assert rows[1]["tuned"] == {"client.lr": 0.05} and rows[1]["validation_scores"] == [None, None]  # the numbers' point, in table.json
    table = format_seed_table(rows, "FedAvg", "FedAvg", {"client.lr": [0.05, 0.1]}, "final", 0.2)
    assert "| Broken (seed 0: diverged) | none chosen (every point failed at a seed); client.lr=0.05 shown | - |" in table
    assert "| FedAvg | client.lr=0.1 |" in table and "| Broken | diverged | diverged |" in table


def test_rounds_to_target_count_only_seeds_that_had_a_target() -> None:
    """The reference (here the baseline T=1) failed at seed 1, so seed 1 has no target: T=0.1 reached it at seeds 0 and 2
    (rounds 1 and 2) and read "1.5 (2/3)", as if it had missed it at seed 1. A failed variant's row shows no count."""
    base, chill, broken = Variant("T=1", {}, 1.0), Variant("T=0.1", {}, 0.1), Variant("T=0.01", {}, 0.01)
    runs = {("T=1", 0): _out(0.8, 0.8, 0.7, [0.5, 0.8]), ("T=1", 1): None, ("T=1", 2): _out(0.7, 0.7, 0.7, [0.6, 0.7]),
            ("T=0.1", 0): _out(0.85, 0.85, 0.8, [0.85, 0.85]), ("T=0.1", 1): _out(0.9, 0.9, 0.8, [0.9, 0.9]),
            ("T=0.1", 2): _out(0.8, 0.8, 0.8, [0.6, 0.8])}
    runs |= {("T=0.01", s): None for s in range(3)}
    rows = build_seed_rows([base, chill, broken], runs, [0, 1, 2], base, base, None)
    assert rows[1]["target"] == [0.8, None, 0.7] and rows[1]["rounds_to_target"] == [1, None, 2]
    table = format_seed_table(rows, "T=1", "T=1", None, "final", 0.0)
    assert "| 1.5 (2/2) |" in table and "| 2.0 (2/2) |" in table  # T=0.1, and T=1 itself at its two finished seeds
    assert next(line for line in table.splitlines() if line.startswith("| T=0.01")).endswith("| - |")  # failed at every seed: no count, not "never"


def test_the_baselines_own_differences_are_null_not_zero_and_the_tables_print_as_before() -> None:
    """``table.json`` stored the baseline's difference to itself as 0 (``+0.00 ± 0.00``, ``sign_holds`` 0): a reader took it
    for a measured difference. Its row says ``baseline: true`` and has none; the printed tables are unchanged."""
    from chillfl.report.compare import CompareResult, build_rows, format_table

    base, other = Variant("FedAvg", {}, None), Variant("Ditto", {}, None)

    def out(acc: float, local: float) -> RunOutput:
        return RunOutput(None, [{"round": 1, "global_acc": acc}], {"final_global_acc": acc, "best_global_acc": acc, "final_val_acc": acc,
                                                                  "final_global_loss": 1.0, "final_local_acc": local})

    runs = {("FedAvg", s): out(0.5 + s / 10, 0.6) for s in range(3)} | {("Ditto", s): out(0.55, 0.9) for s in range(3)}
    rows = build_seed_rows([base, other], runs, [0, 1, 2], base, base, None)
    assert (rows[0]["baseline"], rows[0]["delta_acc"], rows[0]["delta_local_acc"]) == (True, None, None)
    assert rows[1]["baseline"] is False and rows[1]["delta_acc"]["n"] == 3
    table = format_seed_table(rows, "FedAvg", "FedAvg", None, "final", 0.0, local=True)
    assert "| FedAvg | 60.00 ± 10.00 | 60.00 ± 10.00 | [35.16, 84.84] | +0.00 ± 0.00 | [+0.00, +0.00] | 0/3 | 60.00 ± 0.00 | +0.00 ± 0.00 | [+0.00, +0.00] |" in table
    one = build_rows([base, other], {"FedAvg": runs[("FedAvg", 0)], "Ditto": runs[("Ditto", 0)]}, base, base)
    assert (one[0]["baseline"], one[0]["delta_acc"], one[1]["baseline"]) == (True, None, False)
    assert one[1]["delta_acc"] == pytest.approx(0.05)
    assert "| FedAvg | 50.00 (+0.00) |" in format_table(one, "FedAvg", "FedAvg")
    read_back = json.loads(json.dumps(rows))  # as ``table.json`` holds them
    assert CompareResult(None, read_back, "").no_comparison() is None
    assert CompareResult(None, [read_back[0], {**read_back[1], "delta_acc": None, "final_acc": None}], "").no_comparison() == (
        "only the baseline FedAvg finished; the 1 other variant failed at every seed where the baseline finished")


@pytest.mark.parametrize("where", ["cli", "config"])
def test_controls_asked_for_where_no_variant_is_chilled_are_refused(where: str) -> None:
    """``chillfl compare demo --controls`` (the README's command, the demo at T = 1 alone) ran one variant and no control,
    silently: a comparison asked for step-size controls that has none to add is refused in one line naming the flag."""
    table = {"compare": {"controls": True}} if where == "config" else {}
    config = config_from_dict({"client": {"lr": 0.01}, **table})
    options = CompareOptions(controls=True) if where == "cli" else None
    with pytest.raises(ConfigError) as err:
        plan_runs(config, ["client.lr=0.01,0.1"], options)
    assert err.value.field == ("--controls" if where == "cli" else "compare.controls") and "T != 1" in err.value.message
    assert len(plan_runs(config, ["temperature=1,0.5"], options).variants) == 5  # a chilled variant: its 3 controls


def test_a_skipped_last_round_does_not_hide_the_runs_bytes_budget_or_attack_success() -> None:
    # Round 3 was skipped (Poisson sampling drew nobody, or too few reported): its record has no bytes, epsilon or
    # attack success; the run's final values are round 2's: 2.5 MB, epsilon 0.7, success 0.25.
    records = [
        {"round": 1, "global_acc": 0.5, "bytes_cumulative": 1_000_000, "epsilon": 0.5, "attack_success_rate": 0.5},
        {"round": 2, "global_acc": 0.6, "bytes_cumulative": 2_500_000, "epsilon": 0.7, "attack_success_rate": 0.25},
        {"round": 3, "sampled": [], "dropped": [], "skipped": True, "attempts": 1},
    ]
    summary = {"final_global_acc": 0.6, "best_global_acc": 0.6, "final_global_loss": 1.0}
    only = Variant("FedAvg", {}, 1.0)
    rows = build_seed_rows([only], {("FedAvg", 0): RunOutput(None, records, summary)}, [0], only, only, None)
    assert rows[0]["cumulative_mb"]["mean"] == pytest.approx(2.5)
    assert rows[0]["epsilon"]["mean"] == pytest.approx(0.7)
    assert rows[0]["attack_success_rate"]["mean"] == pytest.approx(0.25)
    single = build_rows([only], {"FedAvg": RunOutput(None, records, summary)}, only, only)
    assert (single[0]["cumulative_mb"], single[0]["epsilon"], single[0]["attack_success_rate"]) == (pytest.approx(2.5), 0.7, 0.25)

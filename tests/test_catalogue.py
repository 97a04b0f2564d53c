"""``chillfl list experiments`` and ``chillfl list``: a catalogue a newcomer can choose from."""

from __future__ import annotations

import dataclasses
import math

from pathlib import Path

import pytest

from chillfl.aggregation.registry import algorithm_names
from chillfl.settings.distillation import method_names
from chillfl.settings.prototypes import method_names as prototype_method_names
from chillfl.catalogue import (
    GPU_CLIENT_STEP_S,
    GPU_FLOPS,
    LARGE,
    MEASURED_CPU_MIN,
    SMALL_FLOPS,
    STEP_S,
    _gpu_minutes,
    _minutes,
    _significant,
    _target,
    entry,
    estimate_cpu_minutes,
    estimate_gpu_minutes,
    format_catalogue,
)
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.experiments import bundled_experiments


def test_targets_are_read_from_the_file_name() -> None:
    assert _target("table4-digits") == "Table 4"
    assert _target("table10-cifar10-10") == "Table 10"
    assert _target("fig7-digits-weak") == "Fig. 7"
    assert _target("study-base") == "study"


def test_rows_say_paper_kind_and_data() -> None:
    e = entry("flexchill/table4-cifar10")
    assert (e.paper, e.target, e.kind, e.data) == ("FLex&Chill", "Table 4", "compare (6 runs)", "data download cifar10")
    assert not e.measured and e.cpu_min is not None and e.cpu_min > 60
    demo = entry("demo")
    assert demo.data == "offline" and demo.kind == "compare (27 runs)"  # 3 temperatures x 3 seeds x 3 lrs
    assert demo.measured
    assert entry("scarlet/public-dataset-mnist1d").kind == "run"


def test_measured_rows_are_the_measured_numbers() -> None:
    for name, minutes in MEASURED_CPU_MIN.items():
        e = entry(name)
        assert e.measured and e.cpu_min == minutes


def test_the_cost_model_on_a_hand_worked_config(tmp_path) -> None:
    # mlp on digits (1438 train, 359 test): 2 clients of 719 samples, 1 per round, 1 epoch, batch 100, 3 rounds.
    path = tmp_path / "c.toml"
    path.write_text('[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 2\nclients_per_round = 1\nrounds = 3\n[client]\nbatch_size = 100\n')
    config = load_config(path, {})
    from chillfl.catalogue import _forward_flops

    flops = _forward_flops(config)
    assert flops is not None and 0 < flops < LARGE  # a small model: the small-model throughput
    steps = 3 * 1 * 1 * math.ceil(719 / 100)  # 24
    samples = 3 * 719
    expected = (steps * STEP_S + (3 * samples + 3 * 359) * flops / SMALL_FLOPS) / 60
    assert math.isclose(estimate_cpu_minutes(config) or 0.0, expected, rel_tol=1e-12)


def test_list_experiments_prints_one_row_per_experiment(capsys) -> None:
    assert main(["list", "experiments"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| experiment")]
    assert [row.split(" | ")[0][2:] for row in rows] == bundled_experiments()
    assert "| demo |" in out and "est." in out


def test_list_is_readable(capsys) -> None:
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert any("flexchill: " in line and "table4-digits" in line for line in lines)


@pytest.mark.parametrize(("what", "titles"), [
    ("methods", ["algorithms", "distillation methods", "prototype methods"]),
    ("attacks", ["attacks"]),
    ("temperatures", ["temperature policies"]),
])
def test_list_of_one_kind_prints_only_its_names(capsys, what: str, titles: list[str]) -> None:
    assert main(["list", what]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.rstrip(":") for line in lines if not line.startswith(" ")] == titles  # no datasets, models or experiments
    assert not any(line.endswith(" ...") for line in lines)  # not a terminal: each summary whole (cut to a terminal's width only)
    if what == "methods":  # a name a line, with the summary its spec gives
        rows = {line.split()[0]: " ".join(line.split()[1:]) for line in lines if line.startswith("  ")}
        assert rows["fedavg"] == "FedAvg (McMahan et al. 2017)"
        assert rows["scarlet"] == "Enhanced ERA (Eq. 4) + synchronized cache (Alg. 2)" and "fedproto" in rows
        assert len(rows) == len(algorithm_names()) + len(method_names()) + len(prototype_method_names())


def test_the_gpu_basis_is_the_h200_measurement() -> None:
    # docs/gpu.md "Speed" (2026-12-04, executor auto, fp32): workload 2, 0.032 s for 100 clients x 5 steps of an MLP;
    # workload 1, 0.865 s for 100 clients x 50 steps of the McMahan CNN, 10.8 TFLOP (43.2 MFLOP a sample x 250,000).
    assert math.isclose(GPU_CLIENT_STEP_S, 0.064e-3, rel_tol=1e-9)
    assert math.isclose(5000 * GPU_CLIENT_STEP_S + 43.2e6 * 250_000 / GPU_FLOPS, 0.865, rel_tol=1e-9)  # workload 1 back
    assert math.isclose(GPU_FLOPS, 10.8e12 / 0.545, rel_tol=1e-9)  # 19.8 TFLOP/s


def test_the_gpu_estimate_on_a_hand_worked_config(tmp_path) -> None:
    # MLP on CIFAR-10 (50,000 train, 10,000 test): 10 clients of 5,000, 5 a round, 2 epochs, batch 100, 4 rounds.
    path = tmp_path / "c.toml"
    path.write_text('[dataset]\nname = "cifar10"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 10\nclients_per_round = 5\nrounds = 4\n[client]\nepochs = 2\nbatch_size = 100\n')
    config = load_config(path, {})
    steps = 4 * 5 * 2 * 50  # 2,000 client steps
    from chillfl.catalogue import _forward_flops

    flops = _forward_flops(config) or 0.0
    trained = (3 * 4 * 5 * 2 * 5000 + 4 * 10000) * flops / GPU_FLOPS  # 3 passes a training sample, 1 an eval one, 4 rounds
    low = (steps * 0.064e-3 + trained) / 60  # a step of 5 clients costs 5/100 of one of 100
    high = (steps * 0.064e-3 * 100 / 5 + trained) / 60  # ... or as much as one of 100
    assert trained / 60 < low / 10  # an MLP: the steps' cost, not the FLOPs
    got = estimate_gpu_minutes(config)
    assert got is not None and math.isclose(got[0], low, rel_tol=1e-9) and math.isclose(got[1], high, rel_tol=1e-9)


def test_the_gpu_estimate_of_a_large_model_is_mostly_its_flops(tmp_path) -> None:
    # ResNet-18 on CIFAR-100, 100 clients a round: both ends agree (the measured 100 clients a step), and the FLOPs at
    # 19.8 TFLOP/s outweigh the steps' cost.
    path = tmp_path / "c.toml"
    path.write_text('[dataset]\nname = "cifar100"\n[model]\nname = "resnet18"\n[federation]\nnum_clients = 100\nrounds = 2\n[client]\nepochs = 1\nbatch_size = 50\n')
    config = load_config(path, {})
    from chillfl.catalogue import _forward_flops

    flops = _forward_flops(config) or 0.0
    trained = (3 * 2 * 100 * 1 * 500 + 2 * 10000) * flops / GPU_FLOPS / 60
    steps = 2 * 100 * 10 * 0.064e-3 / 60
    assert trained > 10 * steps
    got = estimate_gpu_minutes(config)
    assert got is not None and math.isclose(got[0], steps + trained, rel_tol=1e-9) and got[0] == got[1]


def test_gpu_column_for_full_size_experiments_only() -> None:
    full = entry("pa3fed/table2-cifar10-h0.1")  # AlexNet, 10 of 50 clients a round, 250 rounds, 10 runs
    assert full.gpu_min is not None and full.gpu_min[0] <= full.gpu_min[1]
    assert full.gpu_min[0] > 10 and full.gpu_min[1] < full.cpu_min  # type: ignore[operator]
    assert entry("fedchill/table2-digits").gpu_min is None
    table = format_catalogue([full, entry("demo")])
    assert "| GPU minutes (H200) |" in table and "0.064 ms" in table and "19.8 TFLOP/s" in table and "docs/gpu.md" in table
    assert table.splitlines()[3].endswith("| - |")  # the demo: a CPU-scale experiment


def test_minutes_are_shown_to_two_significant_figures() -> None:
    assert [_significant(v) for v in (0.123, 1.26, 12.6, 126.0, 4449.0)] == ["0.12", "1.3", "13", "130", "4,400"]
    assert _gpu_minutes((86.4, 151.0)) == "86-150 est." and _gpu_minutes((130.2, 131.0)) == "130 est." and _gpu_minutes(None) == "-"
    assert _minutes(1440 * 1.2, False) == "1 day est." and _minutes(1440 * 17, True) == "17 days"


def test_every_full_size_experiment_has_a_gpu_estimate(capsys) -> None:
    assert main(["list", "experiments"]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and not line.startswith("| experiment")]
    for row in rows:
        data, gpu = row[4], row[6].rstrip(" |")
        if data == "offline":
            assert gpu == "-", row
        else:
            assert gpu.endswith(" est.") and gpu[0].isdigit(), row  # labelled an estimate, never a bare number


def test_the_stored_flop_counts_are_the_models_counts() -> None:
    """``_catalogue.toml``'s ``[forward_flops]`` (what the listing reads instead of building 18 models) is every bundled
    model counted afresh, no more, no less; when a model or config changes a count, paste the printed table."""
    from chillfl.catalogue import counted_flops, flops_table, stored_flops

    counted = counted_flops()
    assert stored_flops() == counted, "update src/chillfl/experiments/_catalogue.toml:\n" + flops_table(counted)


def test_the_stored_parameter_counts_are_the_models_counts() -> None:
    """``[parameters]`` likewise: every bundled model's trainable parameters, counted afresh."""
    from chillfl.catalogue import counted_parameters, flops_table, stored_parameters

    counted = counted_parameters()
    assert stored_parameters() == counted, "update src/chillfl/experiments/_catalogue.toml:\n" + flops_table(counted, "parameters")
    # mlp on digits (64 inputs, hidden [64], 10 classes): 64 x 64 + 64 + 64 x 10 + 10 = 4,810.
    assert counted["digits:name='mlp'"] == 4810.0


def test_a_model_no_bundled_experiment_uses_is_counted(tmp_path) -> None:
    from chillfl.catalogue import _forward_flops, stored_flops

    path = tmp_path / "c.toml"
    # mlp on digits, hidden [7]: 64*7 + 7*10 = 518 multiply-adds = 1036 FLOPs (the counter counts 2 a multiply-add; biases are free).
    path.write_text('[dataset]\nname = "digits"\n[model]\nname = "mlp"\nhidden = [7]\n')
    config = load_config(path, {})
    assert not any(key.startswith("digits:hidden=[7]") for key in stored_flops())
    assert _forward_flops(config) == 1036.0


def test_the_stored_listing_is_the_computed_one() -> None:
    """``experiments/_listing.toml`` (what ``chillfl list experiments`` reads instead of validating 568 variants) holds
    every bundled experiment's row as computed now, with its config's fingerprint; when one changes, paste the printed file."""
    from chillfl.catalogue import catalogue, listing_file, stored_rows

    computed = catalogue(computed=True)
    stored = stored_rows()
    assert {e.name: e for e in computed} == {name: row for name, (_, row) in stored.items()}, (
        "update src/chillfl/experiments/_listing.toml:\n" + listing_file(computed))
    assert listing_file(computed) == (Path(__file__).parents[1] / "src/chillfl/experiments/_listing.toml").read_text()


def test_a_changed_config_is_listed_from_its_config_not_its_stored_row(monkeypatch) -> None:
    import chillfl.catalogue as catalogue

    name = "fedchill/table2-digits"
    fingerprint, row = catalogue.stored_rows()[name]
    stale = dataclasses.replace(row, kind="compare (1 runs)")
    monkeypatch.setattr(catalogue, "stored_rows", lambda: {name: (fingerprint, stale)})
    assert catalogue.entry(name) == stale  # the fingerprint holds: the stored row is read
    monkeypatch.setattr(catalogue, "stored_rows", lambda: {name: ("0" * 16, stale)})
    assert catalogue.entry(name) == row  # the config changed (another fingerprint): computed afresh

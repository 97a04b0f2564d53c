"""``chillfl list experiments`` and ``chillfl list``: a catalogue a newcomer can choose from."""

from __future__ import annotations

import math

from chillfl.catalogue import LARGE, MEASURED_CPU_MIN, SMALL_FLOPS, STEP_S, _target, entry, estimate_cpu_minutes
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

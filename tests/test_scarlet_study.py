"""``chillfl analyze scarlet-deficit`` (issue 29): the per-run reading, the scaled D, the prefix rule, the tables."""

from __future__ import annotations

import pytest

from chillfl.analysis.scarlet_study import Measure, accuracy_difference, read, scaled_duration
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.runner import run_experiment

TINY = [
    "federation.num_clients=3", "client.epochs=1", "distillation.public_size=60", "distillation.subset_size=20",
    "distillation.server_epochs=1", "distillation.distill_epochs=1", "eval.client_split_size=20",
]


pytestmark = pytest.mark.usefixtures("one_thread")


def test_scaled_duration_is_50_in_2000_rounds_at_least_1():
    assert [scaled_duration(n) for n in (1, 20, 40, 60, 80, 100, 2000)] == [1, 1, 1, 2, 2, 3, 50]


def test_the_accuracy_difference_cell_clips_its_interval_to_100_points():
    """Arm accuracies 0.95, 0.15, 0.55 against DS-FL's 0.05, 0.05, 0.05: d = [0.90, 0.10, 0.50], mean 0.50, std 0.40, half
    width 4.3027 * 0.40 / sqrt(3) = 0.993666 -> [-49.37, +149.37] points, shown to +100 with the dagger (a difference of
    two accuracies cannot pass it). d = [0.02, 0.03, 0.04]: [+0.52, +5.48], inside, unmarked. One seed: the mean alone."""
    assert accuracy_difference([0.95, 0.15, 0.55], [0.05, 0.05, 0.05]) == "+50.00 ± 40.00 [-49.37, +100.00]†, 3/3"
    assert accuracy_difference([0.12, 0.13, 0.14], [0.10, 0.10, 0.10]) == "+3.00 ± 1.00 [+0.52, +5.48], 3/3"
    assert accuracy_difference([0.5], [0.25]) == "+25.00"


def test_read_on_hand_values():
    records = [
        {"global_acc": 0.1, "bytes_cumulative": 100, "cache_hit_ratio": 0.0, "cache_age_mean": None, "soft_label_entropy": 2.0},
        {"global_acc": 0.2, "bytes_cumulative": 150, "cache_hit_ratio": 0.5, "cache_age_mean": 1.0, "soft_label_entropy": 1.0},
        {"global_acc": 0.3, "bytes_cumulative": 180, "cache_hit_ratio": 1.0, "cache_age_mean": 2.0, "soft_label_entropy": 0.5},
    ]
    # at round 2: accuracy and bytes of round 2; hit ratio (0 + 0.5) / 2; age over rounds that used the cache: 1.0
    assert read(records, 2) == Measure(acc=0.2, bytes=150.0, hit=0.25, age=1.0, entropy=1.5)
    assert read(records, 3) == Measure(acc=0.3, bytes=180.0, hit=0.5, age=1.5, entropy=3.5 / 3)
    assert read(records, 3, window=2).acc == pytest.approx(0.25)  # mean of rounds 2 and 3
    dsfl = [{"global_acc": 0.4, "bytes_cumulative": 10}]  # no cache, no entropy: hit 0, age None
    assert read(dsfl, 1) == Measure(acc=0.4, bytes=10.0, hit=0.0, age=None, entropy=None)


def test_a_shorter_run_is_the_prefix_of_a_longer_one():
    over = {k: v for k, v in (x.split("=") for x in TINY)}
    over = {k: (int(v) if v.isdigit() else v) for k, v in over.items()}
    base = {"dataset.name": "digits", "model.name": "flexchill_cnn", "distillation.method": "scarlet", "distillation.cache_duration": 2, **over}
    short = run_experiment(load_config(None, {**base, "federation.rounds": 2}), write=False, progress=False).records
    long = run_experiment(load_config(None, {**base, "federation.rounds": 3}), write=False, progress=False).records
    assert long[:2] == short


def test_study_tables(capsys):
    args = ["analyze", "scarlet-deficit", "-q", "--seeds", "0,1", "--rounds", "1,2", "--durations", "0,2", "--betas", "1",
            "--subset-sizes", "", "--parts", "d,beta,smooth", *TINY]
    assert main(args) == 0
    out = capsys.readouterr().out
    smooth = out.split("last quarter of the rounds")[1]
    assert smooth.count("| 2 | SCARLET beta=2, D=2 |") == 1  # the smooth table: same arms, accuracy over the last rounds
    out = out.split("last quarter of the rounds")[0]
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): [c.strip() for c in line.split("|")[3:-1]]
            for line in out.splitlines() if line.startswith("| ") and not line.startswith("| rounds")}
    # columns: arm acc, DS-FL acc, difference, bytes ratio, hit ratio, age, entropy
    assert rows[("2", "SCARLET beta=2, D=0")][3:6] == ["1.000", "0.000", "-"]  # no cache: DS-FL's bytes, nothing served
    assert rows[("1", "SCARLET beta=2, D=2")][3:6] == ["1.000", "0.000", "-"]  # round 1: nothing cached yet
    ratio, hit, age = rows[("2", "SCARLET beta=2, D=2")][3:6]
    assert float(ratio) < 1.0 and float(hit) > 0.0 and age == "1.0"  # round 2 reads round 1's entries: age 1
    assert rows[("2", "SCARLET beta=1, D=0")][0] != "" and ("2", "SCARLET beta=1, D=2") in rows
    assert rows[("2", "DS-FL (ERA, T = 0.1)")][2].startswith("+0.00 ± 0.00")  # DS-FL against itself


def test_bad_parts_is_a_usage_error(capsys):
    assert main(["analyze", "scarlet-deficit", "--parts", "d,nope"]) == 2
    captured = capsys.readouterr()
    assert "--parts" in captured.err and captured.out == ""  # one line, nothing printed before it


@pytest.mark.parametrize(("args", "field"), [
    (["--betas", "0"], "--betas"),  # was "--durations: D must be >= 0 and beta > 0"
    (["--betas", "nan"], "--betas"),
    (["--betas", "1e5"], "--betas"),  # past Enhanced ERA's bound: was refused midway, naming enhanced_era.beta
    (["--seeds", ","], "--seeds"),  # was "--rounds: give at least one seed ..."
    (["--seeds", "0,,1"], "--seeds"),  # an empty item was dropped: seeds 0 and 1 ran
    (["--durations", "0,2,"], "--durations"),
    (["--subset-sizes", "0", "--parts", "ratio"], "--subset-sizes"),  # was runs, then "distillation.subset_size"
    (["--subset-sizes", "401", "--parts", "ratio"], "--subset-sizes"),  # |P| = 400 in the default config
])
def test_bad_input_names_its_field_before_any_run(capsys, args, field):
    assert main(["analyze", "scarlet-deficit", "-q", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {field}:"), err
    assert captured.out == ""

"""Stability measures of PA3Fed Table 1 and Fig. 5 on a short hand-computed curve."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from chillfl.metrics.stability import (
    inside_vs_outside_std,
    main,
    max_change_rate,
    mean_absolute_deviation,
    mean_inside_vs_outside_std,
    moving_std,
    stability_measures,
    standard_deviation,
    value_range,
)

CURVE = [1.0, 0.8, 0.4, 0.6]
# mean = 2.8 / 4 = 0.7; deviations (0.3, 0.1, -0.3, -0.1); squares sum to 0.09 + 0.01 + 0.09 + 0.01 = 0.2


def test_standard_deviation() -> None:
    assert standard_deviation(CURVE) == pytest.approx(math.sqrt(0.2 / 4))  # population: 0.2236
    assert standard_deviation(CURVE, ddof=1) == pytest.approx(math.sqrt(0.2 / 3))


def test_moving_std() -> None:
    # window 2: (1, .8) -> 0.1; (.8, .4) -> 0.2; (.4, .6) -> 0.1; mean = 0.4 / 3
    assert moving_std(CURVE, window=2) == pytest.approx(0.4 / 3)
    # window 3: (1, .8, .4): mean 2.2/3, squares (.8/3)^2 + (.2/3)^2 + (1/3)^2 = 1.68/9 -> std sqrt(0.56/9)
    #           (.8, .4, .6): mean .6, squares .04 + .04 + 0 = .08 -> std sqrt(.08/3)
    assert moving_std(CURVE, window=3) == pytest.approx((math.sqrt(0.56 / 9) + math.sqrt(0.08 / 3)) / 2)
    assert math.isnan(moving_std(CURVE, window=5))


def test_mad_range_and_change_rate() -> None:
    assert mean_absolute_deviation(CURVE) == pytest.approx(0.8 / 4)  # (0.3 + 0.1 + 0.3 + 0.1) / 4
    assert value_range(CURVE) == pytest.approx(0.6)  # 1.0 - 0.4
    # changes |.8-1| = .2, |.4-.8| = .4, |.6-.4| = .2 -> 0.4; relative .2/1, .4/.8, .2/.4 -> 0.5
    assert max_change_rate(CURVE) == pytest.approx(0.4)
    assert max_change_rate(CURVE, relative=True) == pytest.approx(0.5)


def test_mad_is_about_the_mean() -> None:
    # a skewed curve, where mean (1) and median (0) differ: |0-1| + |0-1| + |3-1| = 4 -> 4/3
    # (about the median it would be (0 + 0 + 3) / 3 = 1)
    assert mean_absolute_deviation([0.0, 0.0, 3.0]) == pytest.approx(4 / 3, rel=1e-12)


def test_stability_measures_bundle() -> None:
    m = stability_measures(CURVE, window=2)
    assert m == pytest.approx({"std": math.sqrt(0.05), "moving_std": 0.4 / 3, "mad": 0.2, "range": 0.6, "max_change_rate": 0.4})


def test_inside_vs_outside_std() -> None:
    # inside (1.0, 0.4): std 0.3; outside (0.8, 0.6): std 0.1
    assert inside_vs_outside_std(CURVE, [True, False, True, False]) == pytest.approx((0.3, 0.1))
    s_in, s_out = inside_vs_outside_std(CURVE, [False] * 4)
    assert math.isnan(s_in) and s_out == pytest.approx(math.sqrt(0.05))
    with pytest.raises(ValueError):
        inside_vs_outside_std(CURVE, [True])


def test_mean_inside_vs_outside_std_over_clients() -> None:
    clp = {0: True, 1: False, 2: True, 3: False}
    clients = {
        5: {0: 1.0, 1: 0.8, 2: 0.4, 3: 0.6},  # (0.3, 0.1) as above
        6: {3: 0.9, 1: 0.5},  # only outside rounds: std of (0.5, 0.9) = 0.2; no inside value
    }
    # inside: mean(0.3) = 0.3; outside: mean(0.1, 0.2) = 0.15
    assert mean_inside_vs_outside_std(clients, clp) == pytest.approx((0.3, 0.15))


@pytest.mark.parametrize(
    ("setup", "named"),
    [
        ("missing", "missing: is not a folder"),
        ("empty", "cmp: holds no run"),
        ("garbled", "metrics.jsonl: line 1 is not JSON"),
        ("window", "--window: must be >= 1"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(setup: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "cmp" / "run_seed0"
    run.mkdir(parents=True)
    good = json.dumps({"round": 1, "client_train_loss": {"0": 1.0}}) + "\n"
    if setup != "empty":
        (run / "metrics.jsonl").write_text('{"round": 1, "client_train_loss": {' if setup == "garbled" else good)
    folder = tmp_path / ("missing" if setup == "missing" else "cmp")
    assert main([str(folder), *(["--window", "0"] if setup == "window" else [])]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and named in err and "Traceback" not in err


def test_cli_leaves_out_failed_and_partial_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps({"round": 1, "client_train_loss": {"0": 1.0}}) + "\n"
    for name in ("A_seed0", "A_seed1.failed", "A_seed2.partial"):
        (tmp_path / "cmp" / name).mkdir(parents=True)
        (tmp_path / "cmp" / name / "metrics.jsonl").write_text(good)
    assert main([str(tmp_path / "cmp")]) == 0
    rows = [line.split(" | ")[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert rows == ["| A_seed0"]


def test_the_unfinished_suffixes_are_the_run_folders_own() -> None:
    from chillfl.metrics.records import UNFINISHED
    from chillfl.storage.results import FAILED, PARTIAL

    assert set(UNFINISHED) == {PARTIAL, FAILED}

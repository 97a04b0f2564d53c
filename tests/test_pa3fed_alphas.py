"""PA3Fed alpha / CLP / weight-shift summary of a run's records (metrics.pa3fed_alphas)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from chillfl.metrics.pa3fed_alphas import alpha_summary, main, mean_summary


RECORDS = [
    # round 1: two first participations (alpha 1), outside the CLP
    {"round": 1, "agg_clp": False, "agg_adapted": False, "agg_alphas": {"0": 1.0, "1": 1.0}, "agg_weight_shift": 0.0},
    # round 2: client 0 returns (0.9), client 2 first (1.0); CLP, adapted with shift 0.02
    {"round": 2, "agg_clp": True, "agg_adapted": True, "agg_alphas": {"0": 0.9, "2": 1.0}, "agg_weight_shift": 0.02},
    # round 3: clients 1 and 2 return (0.6, 0.8); CLP, adapted with shift 0.06
    {"round": 3, "agg_clp": True, "agg_adapted": True, "agg_alphas": {"1": 0.6, "2": 0.8}, "agg_weight_shift": 0.06},
    # round 4: client 0 returns (0.7); outside the CLP, shift 0.1 measured but not used
    {"round": 4, "agg_clp": False, "agg_adapted": False, "agg_alphas": {"0": 0.7}, "agg_weight_shift": 0.1},
]


def test_alpha_summary_by_hand() -> None:
    s = alpha_summary(RECORDS)
    assert s.rounds == 4
    assert s.clp_fraction == 0.5 and s.adapted_fraction == 0.5  # rounds 2, 3 of 4
    # returning alphas: 0.9, 0.6, 0.8, 0.7 -> min 0.6, median (0.7 + 0.8) / 2 = 0.75, max 0.9
    assert (s.alpha_min, s.alpha_median, s.alpha_max) == pytest.approx((0.6, 0.75, 0.9))
    assert s.first_share == pytest.approx(3 / 7)  # clients 0, 1, 2 first seen, out of 7 (round, client) pairs
    assert s.shift_adapted == pytest.approx(0.04)  # (0.02 + 0.06) / 2, round 4's 0.1 not used
    assert s.shift_max == pytest.approx(0.1)


def test_alpha_median_is_a_median_not_a_mean() -> None:
    # returning alphas 0.5, 0.9, 1.0 (round 2): median 0.9, while their mean would be 2.4 / 3 = 0.8
    records = [
        {"round": 1, "agg_clp": False, "agg_adapted": False, "agg_alphas": {"0": 1.0, "1": 1.0, "2": 1.0}, "agg_weight_shift": 0.0},
        {"round": 2, "agg_clp": True, "agg_adapted": True, "agg_alphas": {"0": 0.5, "1": 0.9, "2": 1.0}, "agg_weight_shift": 0.05},
    ]
    s = alpha_summary(records)
    assert (s.alpha_min, s.alpha_median, s.alpha_max) == (0.5, 0.9, 1.0)


def test_alpha_summary_rejects_a_run_without_pa3fed_records() -> None:
    with pytest.raises(ValueError, match="agg_alphas"):
        alpha_summary([{"round": 1, "global_acc": 0.5}])
    only_first = alpha_summary(RECORDS[:1])
    assert math.isnan(only_first.alpha_median) and math.isnan(only_first.shift_adapted)  # no adapted round: no mean


def test_cli_tabulates_pa3fed_runs_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "cmp" / "PA3Fed_seed0").mkdir(parents=True)
    (tmp_path / "cmp" / "FedAvg_seed0").mkdir(parents=True)
    (tmp_path / "cmp" / "PA3Fed_seed0" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (tmp_path / "cmp" / "FedAvg_seed0" / "metrics.jsonl").write_text(json.dumps({"round": 1, "global_acc": 0.5}) + "\n")
    folder = tmp_path / "cmp"
    assert main([str(folder), "--runs"]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {folder}")]
    assert out == [
        f"| {folder} / PA3Fed_seed0 | 4 | 50 | 50 | 0.600 / 0.750 / 0.900 | 43 | 0.0400 | 0.1000 |",
        f"| {folder} (mean of 1 runs) | 4 | 50 | 50 | 0.600 / 0.750 / 0.900 | 43 | 0.0400 | 0.1000 |",
    ]


def test_mean_over_runs() -> None:
    a = alpha_summary(RECORDS)  # clp 0.5, median 0.75, shift_adapted 0.04
    b = alpha_summary(RECORDS[:2])  # rounds 1-2: clp 0.5, returning alphas [0.9], first 3/4, shift_adapted 0.02, max 0.02
    m = mean_summary([a, b])
    assert m.rounds == 3 and m.clp_fraction == 0.5  # (4 + 2) / 2 rounds
    assert m.alpha_median == pytest.approx((0.75 + 0.9) / 2)
    assert m.first_share == pytest.approx((3 / 7 + 3 / 4) / 2)
    assert m.shift_adapted == pytest.approx(0.03) and m.shift_max == pytest.approx(0.06)  # (0.1 + 0.02) / 2


@pytest.mark.parametrize(
    ("setup", "named"),
    [
        ("missing", "missing: is not a folder"),
        ("no_pa3fed", "cmp: holds no PA3Fed run"),
        ("garbled", "metrics.jsonl: line 2 is not JSON"),
        ("malformed", "metrics.jsonl: its PA3Fed records"),
    ],
)
def test_cli_bad_folder_is_one_line_and_exit_2(
    setup: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "cmp" / "run_seed0"
    run.mkdir(parents=True)
    lines = {
        "no_pa3fed": json.dumps({"round": 1, "global_acc": 0.5}) + "\n",
        "garbled": json.dumps(RECORDS[0]) + '\n{"round": 2, "agg_alphas": {"0": 0.9}\n',
        "malformed": json.dumps({"round": 1, "agg_alphas": [0.9]}) + "\n",
    }
    if setup in lines:
        (run / "metrics.jsonl").write_text(lines[setup])
    folder = tmp_path / ("missing" if setup == "missing" else "cmp")
    assert main([str(folder)]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # nothing half-written: not even the header
    assert err.count("\n") == 1 and named in err and "Traceback" not in err


def test_cli_leaves_out_failed_and_partial_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a compare folder keeps a diverged seed as NAME.failed and leaves it out of its table's statistics; so does this mean
    folder = tmp_path / "cmp"
    other = [{**r, "agg_alphas": {k: 0.1 for k in r["agg_alphas"]}} for r in RECORDS]  # alpha min 0.1 if it were counted
    for name, records in (("PA3Fed_seed0", RECORDS), ("PA3Fed_seed1.failed", other), ("PA3Fed_seed2.partial", other)):
        (folder / name).mkdir(parents=True)
        (folder / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main([str(folder)]) == 0
    (line,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(f"| {folder}")]
    assert line == f"| {folder} (mean of 1 runs) | 4 | 50 | 50 | 0.600 / 0.750 / 0.900 | 43 | 0.0400 | 0.1000 |"
    assert main([str(folder / "PA3Fed_seed1.failed")]) == 0  # named itself, it is taken
    assert "0.100 / 0.100 / 0.100" in capsys.readouterr().out

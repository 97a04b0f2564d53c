"""``chillfl list experiments --calibrate``: the CPU minutes scaled to this machine by one timed probe run."""

from __future__ import annotations

import itertools
import math

import pytest

import chillfl.machine_speed as machine_speed
from chillfl.catalogue import MEASURED_CPU_MIN, entry, estimate_cpu_minutes, format_catalogue
from chillfl.cli import main
from chillfl.config import config_from_dict, read_config_file
from chillfl.experiments import resolve_config
from chillfl.machine_speed import Calibration, calibrate, probe_config


def test_the_factor_is_the_probe_against_its_estimate() -> None:
    found = Calibration(seconds=1.0, estimate=2.0, rounds=10)
    assert found.factor == 0.5
    said = found.describe()
    assert "10 rounds" in said and "1.00 s of CPU against 2.00 s estimated" in said and "x 0.50" in said


def test_a_scaled_listing_scales_every_cpu_figure_and_marks_it_an_estimate() -> None:
    demo, full, tiny = entry("demo"), entry("fedchill/table1-cifar10-10"), entry("scarlet/public-dataset-mnist1d")
    assert demo.measured and MEASURED_CPU_MIN["demo"] == 1.6 and full.cpu_min is not None and full.gpu_min is not None
    plain = format_catalogue([demo, full, tiny])
    scaled = format_catalogue([demo, full, tiny], 0.5, "calibrated here: x 0.50")
    assert "| CPU minutes (dev. machine) |" in plain and "| CPU minutes (this machine) |" in scaled
    assert "| offline | 1.6 | - |" in plain  # measured on the development machine: no "est."
    assert "| offline | 0.8 est. | - |" in scaled  # 1.6 x 0.5, measured elsewhere: an estimate here
    plain_row = next(line for line in plain.splitlines() if line.startswith("| fedchill/table1-cifar10-10 "))
    scaled_row = next(line for line in scaled.splitlines() if line.startswith("| fedchill/table1-cifar10-10 "))
    assert plain_row.split(" | ")[-1] == scaled_row.split(" | ")[-1]  # the GPU column is not the CPU's to scale
    assert full.cpu_min * 0.5 >= 1440  # both in days (a day or more)
    days = [f"{d} day{'s' if d != 1 else ''}" for d in (round(full.cpu_min / 1440), round(full.cpu_min * 0.5 / 1440))]  # "1 day", "3 days"
    assert f"| {days[0]} est. |" in plain_row and f"| {days[1]} est. |" in scaled_row
    assert "Calibrated here: x 0.50." in scaled and "--calibrate" in plain and "Calibrated here" not in plain


def test_calibrate_keeps_the_best_try_and_prices_the_probe() -> None:
    ticks = itertools.accumulate([0.0, 3.0, 0.0, 1.0, 0.0, 2.0])  # three tries: 3 s, 1 s, 2 s
    found = calibrate(rounds=1, tries=3, clock=lambda: next(ticks))
    assert found.seconds == 1.0 and found.rounds == 1
    expected = (estimate_cpu_minutes(probe_config(1)) or 0.0) * 60
    assert expected > 0 and math.isclose(found.estimate, expected, rel_tol=1e-12)


def test_calibrate_refuses_no_tries() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        calibrate(rounds=1, tries=0)


def test_the_probe_is_a_sequential_one_thread_run_of_the_demos_setting() -> None:
    config = probe_config()
    demo = config_from_dict({k: v for k, v in read_config_file(resolve_config("demo")).items() if k not in ("compare", "tune")})
    assert (config.executor, config.threads, config.device) == ("sequential", 1, "cpu")  # what the cost model was fitted on, also beside a GPU
    assert config.federation.rounds == machine_speed.PROBE_ROUNDS
    for part in ("dataset", "partition", "model"):
        assert getattr(config, part) == getattr(demo, part)
    assert (config.federation.num_clients, config.federation.clients_per_round) == (demo.federation.num_clients, demo.federation.clients_per_round)
    assert (config.client.epochs, config.client.batch_size) == (demo.client.epochs, demo.client.batch_size)


def test_list_experiments_calibrate_prints_the_scaled_table(capsys, monkeypatch) -> None:
    monkeypatch.setattr(machine_speed, "calibrate", lambda: Calibration(1.0, 2.0, 10))
    assert main(["list", "experiments", "--calibrate"]) == 0
    out, err = capsys.readouterr()
    assert "| CPU minutes (this machine) |" in out and "| demo | - | demo | compare (27 runs) | offline | 0.8 est. | - |" in out
    assert "x 0.50" in out and "calibrating" in err
    assert main(["list", "experiments", "--calibrate", "-q"]) == 0
    assert capsys.readouterr().err == ""


def test_calibrate_with_anything_but_experiments_is_one_line_exit_2(capsys) -> None:
    assert main(["list", "methods", "--calibrate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calibrate" in err[0] and "experiments" in err[0]


def test_a_stop_signal_during_calibration_is_one_line_with_the_signals_exit(capsys, monkeypatch) -> None:
    import signal

    from chillfl.runner import RunInterrupted

    def stopped() -> Calibration:
        raise RunInterrupted(signal.SIGTERM, None, 2)

    monkeypatch.setattr(machine_speed, "calibrate", stopped)
    assert main(["list", "experiments", "--calibrate", "-q"]) == 128 + signal.SIGTERM
    out, err = capsys.readouterr()
    assert out == "" and err == "chillfl: calibration interrupted by SIGTERM after round 2 of its probe; nothing was written\n"


def test_reproduce_dry_run_calibrate_scales_its_minutes(capsys, monkeypatch, tmp_path) -> None:
    args = ["reproduce", "fedchill", "--dry-run", "--out", str(tmp_path / "r")]
    assert main(args) == 0
    plain = capsys.readouterr().out
    monkeypatch.setattr(machine_speed, "calibrate", lambda: Calibration(1.0, 2.0, 10))
    assert main([*args, "--calibrate", "-q"]) == 0
    scaled = capsys.readouterr().out
    minutes = [float(line.split(" | ")[6].split()[0]) for text in (plain, scaled) for line in text.splitlines() if line.startswith("| fedchill/")]
    assert len(minutes) == 2 and minutes[1] == pytest.approx(minutes[0] * 0.5, abs=0.06)  # shown to 0.1 min
    assert "--calibrate scales it to this machine" in plain and "x 0.50, this machine's factor" in scaled


def test_reproduce_calibrate_without_dry_run_is_one_line_exit_2(capsys) -> None:
    assert main(["reproduce", "fedchill", "--calibrate"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calibrate" in err[0] and "--dry-run" in err[0]

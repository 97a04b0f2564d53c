"""``chillfl analyze temperature-sweep``: diverged cells, clients without training rows, and the sweep's own reasons."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import chillfl.analysis.temperature_sweep as module
from chillfl.analysis.temperature_sweep import best_temperatures, run_temperature_sweep
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_data
from test_temperature_sweep import TINY as SWEEP_TINY

TINY = {**{k: v for k, v in SWEEP_TINY.items() if k != "client.lr"}, "name": "tf"}  # test_temperature_sweep's, at the default lr


GRID = [0.25, 0.5, 1.0]


def tiny_config(tmp_path, **extra):
    return load_config(None, {**TINY, "out_dir": str(tmp_path), **extra})


def diverging(monkeypatch, cells: set[tuple[int, int]]) -> None:
    """Make the sweep's evaluation of (row, temperature index) ``cells`` NaN, as a diverged training gives."""
    real = module.evaluate
    calls = iter(range(10**6))

    def evaluate(*args, **kwargs):
        k = next(calls)
        got = real(*args, **kwargs)
        return (math.nan, math.nan) if divmod(k, len(GRID)) in cells else got

    monkeypatch.setattr(module, "evaluate", evaluate)


def test_best_temperature_is_over_the_finite_cells() -> None:
    acc = np.array([[0.5, np.nan, 0.4], [np.nan, np.nan, np.nan], [0.3, 0.6, np.nan]])
    with np.errstate(all="raise"):
        got = best_temperatures(acc, GRID, "mean")
    assert got[0] == 0.25 and math.isnan(got[1]) and got[2] == 0.5


@pytest.mark.filterwarnings("error")  # no numpy RuntimeWarning (mean of an empty slice, all-NaN max)
def test_a_diverged_cell_leaves_the_others_and_a_dead_client_leaves_the_correlations(tmp_path, monkeypatch, capsys) -> None:
    diverging(monkeypatch, {(1, 0), (1, 1), (1, 2), (2, 2)})  # client 1 diverged at every T, client 2 at T = 1
    result = run_temperature_sweep(tiny_config(tmp_path), GRID, progress=False)
    assert math.isnan(result.best_temperature[1])
    assert np.isfinite(result.best_temperature[[0, 2, 3]]).all()
    assert result.best_accuracy[2] == np.nanmax(result.accuracy[2])
    rows = {row["measure"]: row for row in result.correlation["best_temperature"]}
    assert rows["ratio"]["n"] == 3 and math.isfinite(rows["ratio"]["r"])  # before: nan for every measure
    assert {row["n"] for row in result.correlation["gain"]} == {2}  # client 2 has no gain over T = 1 either
    err = capsys.readouterr().err.strip().splitlines()
    assert [line for line in err if "[1]" in line] == [err[0]] and "no finite accuracy at any temperature" in err[0]
    assert len(err) == 2 and "[2]" in err[1] and "gain" in err[1]
    assert result.folder is not None
    sweep = json.loads((result.folder / "temperature_sweep.json").read_text())
    assert [c["non_finite_temperatures"] for c in sweep["clients"]] == [[], GRID, [1.0], []]
    assert "client 1 at T = 0.25, 0.5, 1; client 2 at T = 1" in (result.folder / "correlation.md").read_text()


def test_a_sweep_where_fewer_than_two_clients_are_finite_is_refused(tmp_path, monkeypatch) -> None:
    diverging(monkeypatch, {(c, j) for c in range(3) for j in range(len(GRID))})
    with pytest.raises(ConfigError) as info:
        run_temperature_sweep(tiny_config(tmp_path), GRID, progress=False)
    assert info.value.field == "client.lr" and "[0, 1, 2]" in info.value.message
    assert not list(tmp_path.iterdir())


def test_a_client_without_training_rows_is_skipped_as_a_run_does(tmp_path, capsys) -> None:
    config = tiny_config(tmp_path, **{"partition.min_size": 0, "federation.num_clients": 12, "partition.alpha": 0.01})
    sizes = build_data(config).class_counts().sum(axis=1)
    idle = [int(c) for c in np.flatnonzero(sizes == 0)]
    assert idle  # the case itself: before, "clients [...] have no validation samples" stopped the sweep
    result = run_temperature_sweep(config, [0.5, 1.0], progress=False)
    assert result.client_ids() == [c for c in range(12) if c not in idle] and result.accuracy.shape == (12 - len(idle), 2)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"clients {idle} have no training rows" in err[0] and "no_data" in err[0]
    assert result.folder is not None
    sweep = json.loads((result.folder / "temperature_sweep.json").read_text())
    assert [c["client"] for c in sweep["clients"]] == result.client_ids() and sweep["skipped_no_training_rows"] == idle


def test_eval_clients_none_gets_the_sweeps_reason_not_the_decays(tmp_path, capsys) -> None:
    from chillfl.cli import main

    out = tmp_path / "out"
    args = ["analyze", "temperature-sweep", "fedchill/table4-digits", f"out_dir={out}", "temperature.policy=fedchill", "eval.clients=none", "-q"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("chillfl: error: eval.clients: the sweep evaluates every client on its own split") and "\n" not in err
    assert "decay" not in err and not out.exists()

"""``chillfl analyze temperature-sweep``: FedChill Fig. 1 / App. A.5 (best temperature per client and correlations)."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
import torch
from scipy import stats

from chillfl.analysis.temperature_sweep import (
    DEFAULT_TEMPERATURES,
    add_parser,
    best_temperatures,
    parse_temperatures,
    run_temperature_sweep,
)
from chillfl.config import load_config
from chillfl.experiment import build_data, build_initial_model
from chillfl.errors import ConfigError
from chillfl.temperature.heterogeneity import MEASURES
from chillfl.seeds import derive_seed
from chillfl.training.local import LocalSpec, evaluate, train_client

TINY = {
    "name": "sweep",
    "dataset.name": "digits",
    "partition.name": "dirichlet_balanced",
    "partition.alpha": 0.5,
    "model.name": "flexchill_cnn",
    "federation.num_clients": 4,
    "client.epochs": 1,
    "client.batch_size": 64,
    "client.lr": 0.05,
    "eval.client_split_size": 40,
}


def tiny_config(tmp_path, **extra):
    return load_config(None, {**TINY, "out_dir": str(tmp_path), **extra})


# ------------------------------------------------------------------ pure helpers


def test_parse_temperatures() -> None:
    assert parse_temperatures(None) == list(DEFAULT_TEMPERATURES) == [0.05, 0.1, 0.25, 0.5, 1.0]
    assert parse_temperatures("1, 0.05,0.5") == [0.05, 0.5, 1.0]  # sorted (a value given twice is refused: below)
    assert parse_temperatures([2, 0.1]) == [0.1, 2.0]
    for bad in ("a,1", "0,1", "-1,1", "1", "inf,1", "1, 0.05,0.5,0.5"):
        with pytest.raises(ConfigError) as info:
            parse_temperatures(bad)
        assert info.value.field == "--temperatures"


def test_best_temperatures_and_ties_by_hand() -> None:
    temps = [0.1, 0.5, 1.0]
    acc = np.array(
        [
            [0.50, 0.70, 0.70],  # tie 0.5 / 1.0: mean 0.75, lowest 0.5, highest 1.0
            [0.90, 0.10, 0.20],  # unique best 0.1
            [0.30, 0.30, 0.30],  # all tied: mean (0.1 + 0.5 + 1.0) / 3 = 0.5333...
        ]
    )
    assert best_temperatures(acc, temps, "mean") == pytest.approx([0.75, 0.1, 1.6 / 3])
    assert best_temperatures(acc, temps, "lowest") == pytest.approx([0.5, 0.1, 0.1])
    assert best_temperatures(acc, temps, "highest") == pytest.approx([1.0, 0.1, 1.0])
    with pytest.raises(ConfigError) as info:
        best_temperatures(acc, temps, "median")
    assert info.value.field == "--ties"


# ------------------------------------------------------------------ the sweep


def test_sweep_trains_each_client_alone_and_writes_fig1(tmp_path) -> None:
    config = tiny_config(tmp_path)
    grid = [0.1, 1.0]
    result = run_temperature_sweep(config, grid, progress=False)

    # Folder: finished (renamed from .partial) with every artefact.
    folder = result.folder
    assert folder is not None and folder.name == "sweep-temperature-sweep"
    assert not list(tmp_path.glob("*.partial"))
    for name in ("heatmap.png", "scatter.png", "correlation.md", "correlation.json", "temperature_sweep.json", "config.toml"):
        assert (folder / name).stat().st_size > 0, name

    # One accuracy per (client, T); the best T is the argmax (no ties resolved here unless equal).
    assert result.accuracy.shape == (4, 2)
    sweep = json.loads((folder / "temperature_sweep.json").read_text())
    assert sweep["temperatures"] == grid and len(sweep["clients"]) == 4
    for cid, row in enumerate(sweep["clients"]):
        assert row["accuracy"] == pytest.approx(result.accuracy[cid].tolist())
        assert row["best_accuracy"] == pytest.approx(max(row["accuracy"]))
        assert row["gain"] == pytest.approx(max(row["accuracy"]) - row["accuracy"][-1])  # vs the largest T (1.0)
        assert sum(row["class_counts"]) == row["size"]

    # Independent recomputation of client 2 at T = 1: train_client from the seeded initial model,
    # the client's own batch stream (seed, "sweep", cid), evaluated on its validation split.
    data = build_data(config)
    model, initial = build_initial_model(config, data.dataset.input_shape, data.num_classes)
    spec = LocalSpec(epochs=1, batch_size=64)
    x, y = data.client_train(2)
    out = train_client(model, initial, x, y, spec=spec, lr=0.05, temperature=1.0, context={}, generator=torch.Generator().manual_seed(derive_seed(0, "sweep", 2)))
    acc, _ = evaluate(model, out.params, *data.client_eval(2))
    assert result.accuracy[2, 1] == acc

    # A.5 rows: every measure vs the best temperature; the ratio row is Pearson on the raw Eq. 6 score,
    # which equals Pearson on the normalised score plotted (a positive rescaling).
    rows = {r["measure"]: r for r in result.correlation["best_temperature"]}
    assert set(rows) == set(MEASURES)
    assert np.ptp(result.best_temperature) > 0  # this split: best T differs between clients (1.0, 0.55 = tie mean)
    expected = stats.pearsonr(result.heterogeneity, result.best_temperature)
    assert rows["ratio"]["r"] == pytest.approx(expected.statistic)
    assert rows["ratio"]["p"] == pytest.approx(expected.pvalue)
    md = (folder / "correlation.md").read_text()
    assert "| ratio |" in md and "best temperature" in md

    # Deterministic: the same config gives the same matrix bit for bit.
    again = run_temperature_sweep(config, grid, progress=False, write=False)
    assert np.array_equal(again.accuracy, result.accuracy) and again.folder is None


def test_sweep_user_errors(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        run_temperature_sweep(tiny_config(tmp_path, **{"eval.clients": "none"}), [0.1, 1.0], progress=False)
    assert info.value.field == "eval.clients"
    with pytest.raises(ConfigError) as info:
        run_temperature_sweep(tiny_config(tmp_path), "0.1", progress=False)
    assert info.value.field == "--temperatures"
    with pytest.raises(ConfigError) as info:
        run_temperature_sweep(tiny_config(tmp_path, **{"federation.num_clients": 1}), [0.1, 1.0], progress=False)
    assert info.value.field == "federation.num_clients"
    assert not list(tmp_path.iterdir())  # nothing written on a user error


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError], ids=["ctrl-c", "disk-full"])
def test_a_sweep_stopped_while_it_writes_leaves_no_folder(tmp_path, monkeypatch, stop) -> None:
    """A Ctrl-C (or a full disk) while the folder was written left ``NAME-temperature-sweep.partial``, half written:
    nothing resumes an analysis, and the next sweep of the name went to ``NAME-temperature-sweep-2``."""
    import chillfl.analysis.temperature_sweep as module

    def plotting(*args, **kwargs):
        raise stop

    monkeypatch.setattr(module, "plot_scatter", plotting)
    with pytest.raises(stop):
        run_temperature_sweep(tiny_config(tmp_path), [0.1, 1.0], progress=False)
    assert not list(tmp_path.glob("*temperature-sweep*")), list(tmp_path.iterdir())


def test_cli_parser_runs_the_sweep(tmp_path, capsys) -> None:
    parser = argparse.ArgumentParser(prog="chillfl analyze")
    add_parser(parser.add_subparsers(dest="analysis", required=True))
    cfg = tmp_path / "exp.toml"
    cfg.write_text(
        'name = "cli"\n[dataset]\nname = "digits"\n[federation]\nnum_clients = 3\n'
        "[client]\nepochs = 1\nbatch_size = 64\n[eval]\nclient_split_size = 30\n"
    )
    args = parser.parse_args(["temperature-sweep", str(cfg), f"out_dir={tmp_path / 'out'}", "--temperatures", "0.25,1", "--ties", "lowest", "-q"])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "best temperature per client" in printed and "ratio" in printed
    assert (tmp_path / "out" / "cli-temperature-sweep" / "heatmap.png").is_file()
    bad = parser.parse_args(["temperature-sweep", str(cfg), "--temperatures", "0.25,x"])
    with pytest.raises(ConfigError):
        bad.func(bad)


def test_its_folder_is_no_run_or_comparison_and_a_wrong_part_is_refused_first(tmp_path, capsys) -> None:
    """Before, its ``sweep.json`` (a comparison's file name) made ``status`` fail on a KeyError, ``resume`` call it a finished
    comparison and ``analyze`` ask for its run folders; and a config naming an unknown method ran the sweep."""
    from chillfl.cli import main

    cfg = tmp_path / "exp.toml"
    cfg.write_text('name = "cli"\n[dataset]\nname = "digits"\n[federation]\nnum_clients = 3\n'
                   "[client]\nepochs = 1\nbatch_size = 64\n[eval]\nclient_split_size = 30\n")
    out = tmp_path / "out"
    assert main(["analyze", "temperature-sweep", str(cfg), f"out_dir={out}", "algorithm.name=bogus", "-q"]) == 2
    assert capsys.readouterr().err.startswith("chillfl: error: algorithm.name: unknown value 'bogus'") and not out.exists()
    assert main(["analyze", "temperature-sweep", str(cfg), f"out_dir={out}", "--temperatures", "0.5,1", "-q"]) == 0
    folder = out / "cli-temperature-sweep"
    capsys.readouterr()
    for legacy in (False, True):  # an older chillfl's folder named its table sweep.json
        if legacy:
            (folder / "temperature_sweep.json").rename(folder / "sweep.json")
        for command in (["status", str(folder)], ["resume", str(folder)], ["analyze", "calibration", str(folder)], ["report", str(folder), "-o", str(tmp_path / "r.html")]):
            assert main(command) == 2, command
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and f"{folder} is a temperature sweep's folder (`chillfl analyze temperature-sweep`), not a run's or a comparison's" in err[0], (command, err)
    assert sorted(p.name for p in folder.iterdir()) == ["config.toml", "correlation.json", "correlation.md", "heatmap.png", "scatter.png", "sweep.json"]
    assert not (tmp_path / "r.html").exists()


def test_a_step_schedule_below_the_lr_floor_is_refused_before_the_sweep_naming_client_epochs(tmp_path) -> None:
    # lr 0.05 * 1e-30^k at local step k: step 3 (k = 2) is 5e-62, below float32's smallest normal (1.18e-38); each client
    # takes more than 3 steps (over 100 rows in batches of 64, 2 epochs). Refused before any training, as a run's check
    # does, naming client.epochs (the training's own check mid-sweep named "a method's stage")
    extra = {"client.epochs": 2, "client.lr_schedule": "step", "client.lr_schedule_over": "steps", "client.lr_step_size": 1, "client.lr_gamma": 1e-30}
    with pytest.raises(ConfigError) as info:
        run_temperature_sweep(tiny_config(tmp_path, **extra), [0.1, 1.0], progress=False)
    assert info.value.field == "client.lr_gamma"
    assert "local step 3 of the" in str(info.value) and "lower client.epochs" in str(info.value)
    assert "a training takes" in str(info.value) and "round" not in str(info.value)  # one training: no round of the run's to name
    assert not list(tmp_path.iterdir())

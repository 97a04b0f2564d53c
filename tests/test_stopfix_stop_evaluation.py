"""A run a callback stops at a round ``eval.every`` skips: its stop round is its last, so ``summary.json`` holds the
stopped model's evaluation (``final_global_acc``, ``rounds_to_target``, ``target_eval_interval``) as a last round's,
while ``metrics.jsonl`` stays the uninterrupted run's so that resuming it gives that run bit for bit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import chillfl
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.experiment import build_experiment
from chillfl.storage.model_file import read_model
from chillfl.training.local import evaluate

CONFIG: dict[str, Any] = {
    "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "federation": {"num_clients": 4, "rounds": 4},
    "eval": {"every": 3, "client_split_size": 20, "target_accuracy": 0.05}, "checkpoint": {"every": 0}, "seed": 5,
}


def stop_at_2(record: dict[str, Any], run: Any) -> None:
    if record["round"] == 2:
        run.stop("plateau")


def test_a_stop_at_a_round_eval_every_skips_evaluates_the_stopped_model_into_the_summary_only(tmp_path: Path) -> None:
    out = str(tmp_path / "out")
    full = chillfl.run(config={**CONFIG, "name": "full", "out_dir": out}, progress=False)
    stopped = chillfl.run(config={**CONFIG, "name": "st", "out_dir": out}, callbacks=[stop_at_2], progress=False)
    folder = stopped.folder
    assert folder is not None and stopped.summary["stopped"] == {"round": 2, "reason": "plateau"}
    assert all("global_acc" not in r for r in stopped.records) and stopped.records == full.records[:2]  # metrics.jsonl as it was

    # the saved (round-2) model evaluated by hand on the run's own test set
    config = load_config(folder / "config.toml")
    exp = build_experiment(config)
    x, y = exp.data.test()
    acc, loss = evaluate(exp.model, read_model(folder / "model.safetensors"), x, y, config.eval.batch_size)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["final_global_acc"] == acc == summary["best_global_acc"] and summary["final_global_loss"] == loss
    assert summary["best_global_acc_round"] == 2 and summary["rounds_to_target"] == 2  # the target (5 %) is met where measured
    assert summary["target_eval_interval"] == 2  # round 1 unmeasured, round 2 measured: may be 1 round late (was 1)
    assert "global_acc" not in json.loads((folder / "metrics.jsonl").read_text().splitlines()[-1])

    # still resumable: the resumed run is the uninterrupted one, byte for byte
    assert main(["resume", str(folder), "-q"]) == 0
    assert full.folder is not None
    for name in ("metrics.jsonl", "model.safetensors"):
        assert (folder / name).read_bytes() == (full.folder / name).read_bytes(), name
    resumed = json.loads((folder / "summary.json").read_text())
    assert "stopped" not in resumed and resumed["final_global_acc"] == full.summary["final_global_acc"]
    assert resumed["target_eval_interval"] == full.summary["target_eval_interval"] == 3


def test_a_stop_at_an_evaluated_round_keeps_its_own_evaluation(tmp_path: Path) -> None:
    config = {**CONFIG, "name": "ev", "out_dir": str(tmp_path / "out"), "eval": {**CONFIG["eval"], "every": 2}}
    stopped = chillfl.run(config=config, callbacks=[stop_at_2], write=False, progress=False)
    assert stopped.summary["final_global_acc"] == stopped.records[-1]["global_acc"]
    assert stopped.summary["target_eval_interval"] == 2


def test_without_a_folder_or_a_target_the_summary_still_has_the_stopped_models_accuracy(tmp_path: Path) -> None:
    config = {**CONFIG, "eval": {"every": 3, "client_split_size": 20}}
    stopped = chillfl.run(config=config, callbacks=[stop_at_2], write=False, progress=False)
    assert "global_acc" not in stopped.records[-1]
    assert "rounds_to_target" not in stopped.summary

    # the same run written: its saved (round-2) model evaluated by hand is the accuracy the unwritten run's summary holds
    written = chillfl.run(config={**config, "name": "w", "out_dir": str(tmp_path / "out")}, callbacks=[stop_at_2], progress=False)
    assert written.folder is not None
    loaded = load_config(written.folder / "config.toml")
    exp = build_experiment(loaded)
    x, y = exp.data.test()
    acc, loss = evaluate(exp.model, read_model(written.folder / "model.safetensors"), x, y, loaded.eval.batch_size)
    assert stopped.summary["final_global_acc"] == acc == written.summary["final_global_acc"]
    assert stopped.summary["final_global_loss"] == loss

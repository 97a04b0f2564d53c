"""Folders an older chillfl wrote, read by today's: their config.toml records ``batched_conv = "grouped"`` (the default
until 2026-12-04) beside ``executor = "sequential"``, which a later check refused, so every report, analysis, status,
resume and rerun of such a folder failed; a comparison of an older chillfl keeps its flags in ``sweep.json`` alone."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.once import said_once
from chillfl.runner import run_experiment
from procs import InterruptAt

OLD = {"name": "old", "executor": "sequential", "batched_conv": "grouped", "dataset.name": "digits", "model.name": "mlp",
       "model.hidden": [8], "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 3,
       "client.batch_size": 32, "checkpoint.every": 1, "eval.client_split_size": 20, "threads": 1, "device": "cpu"}
WARNED = "batched_conv = 'grouped' does nothing under executor 'sequential'"


def test_the_former_default_under_a_sequential_executor_loads_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.toml"
    path.write_text('name = "old"\nexecutor = "sequential"\nbatched_conv = "grouped"\n[dataset]\nname = "digits"\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING), said_once():  # one call's scope (chillfl.compare, `chillfl compare`)
        for _ in range(3):  # a comparison builds many configs from one: said once
            assert load_config(path).batched_conv == "grouped"
    said = [r.getMessage() for r in caplog.records if "batched_conv" in r.getMessage()]
    assert len(said) == 1 and WARNED in said[0] and "before 2026-12-04" in said[0]
    with pytest.raises(ConfigError) as err:  # any other value still asks for what the executor cannot do
        load_config(None, {"executor": "sequential", "batched_conv": "nhwc"})
    assert err.value.field == "batched_conv"


def test_an_old_run_folder_is_reported_resumed_and_rerun_unedited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the report's page is written here
    out = tmp_path / "out"
    config = load_config(None, {**OLD, "out_dir": str(out)})
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, callbacks=[InterruptAt(2)])
    partial = out / "old.partial"
    assert 'batched_conv = "grouped"' in (partial / "config.toml").read_text(encoding="utf-8")
    assert main(["status", str(partial)]) == 0
    assert main(["resume", str(partial), "--quiet"]) == 0  # no --force: config.toml is as written
    folder = out / "old"
    assert len((folder / "metrics.jsonl").read_text().splitlines()) == 3
    assert "resumed" not in json.loads((folder / "summary.json").read_text())  # the same setup: nothing to record
    assert main(["report", str(folder)]) == 0
    assert main(["run", str(folder / "config.toml"), "--dry-run"]) == 0

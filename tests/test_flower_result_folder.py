"""The Flower ServerApp leaves the result folder ``chillfl run`` leaves (docs/flower.md: "the usual result folder").

Before, its ``config.toml`` held the config as given (not every default, no "# ran with:" environment lines), and
there was no ``partition.json``, ``model.safetensors`` or figure, and ``summary.json`` lacked the environment, the
calibration, the communication totals, the parameter count and the wall time: ``chillfl report`` and ``resume``-side
tools read those. Both now finish through :func:`chillfl.runner.finish_run`. The ServerApp runs in this process over
the in-process grid of tests/test_flower_privacy_attacks.py (chillfl's real Server and ClientApps, without Ray).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from test_flower_privacy_attacks import BASE, NODES, InProcessGrid, server_identity  # noqa: E402,F401  (a fixture)

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.flower import client_app  # noqa: E402
from chillfl.flower.apps import run_server  # noqa: E402
from chillfl.runner import run_experiment  # noqa: E402

VARIES = {"wall_time_s", "runtime"}


def _folder(root: Path, monkeypatch: pytest.MonkeyPatch, on_flower: bool, parts: dict[str, Any]) -> Path:
    """One run from ``root`` with a relative ``out_dir``, so that both runs' config.toml may be equal byte for byte."""
    root.mkdir()
    monkeypatch.chdir(root)
    config = config_from_dict({**BASE, "out_dir": "runs", "name": "same", **parts})
    if on_flower:
        return root / run_server(config, InProcessGrid(client_app(config), NODES), min_nodes=NODES).folder
    folder = run_experiment(config, progress=False).folder
    assert folder is not None
    return root / folder


@pytest.mark.parametrize("parts", [
    {},
    {"algorithm": {"name": "ditto", "lam": 0.1}, "checkpoint": {"every": 0, "client_models": True}},
], ids=["fedavg", "ditto-client-models"])
@pytest.mark.usefixtures("server_identity")
def test_the_flower_server_writes_the_folder_chillfl_run_writes(parts: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = _folder(tmp_path / "own", monkeypatch, False, parts)
    flower = _folder(tmp_path / "flower", monkeypatch, True, parts)
    files = sorted(p.name for p in own.iterdir())
    assert sorted(p.name for p in flower.iterdir()) == files
    assert {"config.toml", "partition.json", "model.safetensors", "metrics.jsonl", "summary.json", "accuracy_loss.png"} <= set(files)
    for name in ("config.toml", "partition.json", "metrics.jsonl", "model.safetensors", "client_models.safetensors"):
        if name in files:
            assert (flower / name).read_bytes() == (own / name).read_bytes(), name
    assert "# ran with:" in (flower / "config.toml").read_text()
    mine, theirs = (json.loads((f / "summary.json").read_text()) for f in (own, flower))
    assert theirs["runtime"] == "flower" and "runtime" not in mine
    assert mine["environment"].pop("executor") == "sequential" and "executor" not in theirs["environment"]  # Flower's nodes train the clients
    for key in ("executor_workers", "memory_format", "batched_conv"):  # how chillfl's own executor laid the steps out
        mine["environment"].pop(key)
    assert {k: v for k, v in theirs.items() if k not in VARIES} == {k: v for k, v in mine.items() if k not in VARIES}
    assert {"environment", "calibration", "communication", "num_parameters", "device", "wall_time_s"} <= set(theirs)

"""A callback or round hook gets its own copy of each round's record: one that edited it (accuracy shown in %) changed
the run's ``records``, ``summary.json`` and what later callbacks saw, while ``metrics.jsonl`` kept the true numbers
(docs/python-api.md: "a callback cannot change the run")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

import chillfl

CONFIG: dict[str, Any] = {"federation": {"num_clients": 4, "rounds": 2}, "client": {"lr": 0.1}, "threads": 1}


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(200, 8, generator=g), torch.randint(0, 3, (200,), generator=g)
    return chillfl.TensorData(x[:160], y[:160], x[160:], y[160:], num_classes=3)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))


def test_a_callback_that_edits_its_record_changes_nothing(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def percent(record: dict[str, Any]) -> None:
        record["global_acc"] *= 100
        record["temperatures"] = {"0": -1.0}

    def later(record: dict[str, Any], run: Any) -> None:
        seen.append(record)
        record.clear()

    plain = chillfl.run(model=_model(), data=_data(), config=CONFIG, out_dir=str(tmp_path), name="plain", progress=False)
    edited = chillfl.run(model=_model(), data=_data(), config=CONFIG, out_dir=str(tmp_path), name="edited", progress=False,
                         callbacks=[percent, later])
    assert edited.records == plain.records and edited.summary["final_global_acc"] == plain.summary["final_global_acc"]
    written = [json.loads(line) for line in (tmp_path / "edited" / "metrics.jsonl").read_text().splitlines()]
    assert written == plain.records
    assert json.loads((tmp_path / "edited" / "summary.json").read_text())["best_global_acc"] == plain.summary["best_global_acc"]
    assert len(seen) == 2 and all(r == {} for r in seen)  # it cleared its own copies, and the run went on as before


def test_a_comparison_on_the_users_model_saves_every_option_of_a_switched_part(tmp_path: Path) -> None:
    """A comparison's run on the user's own model (an Experiment built already) saved its config.toml unresolved: a
    variant that switched to FedProx and FedChill said only their names, where one on a registered model lists every
    option (and a resume then said those options were "added since this run started")."""
    from chillfl.config import tomllib  # tomli on Python 3.10

    grid = {"algorithm.name": ["fedavg", "fedprox"], "temperature.policy": ["none", "fedchill"]}
    chillfl.compare(model=_model(), data=_data(), config={**CONFIG, "federation": {"num_clients": 4, "rounds": 1}}, grid=grid,
                    out_dir=str(tmp_path), name="own", progress=False)
    saved = tomllib.loads(next(tmp_path.glob("own*/fedprox-fedchill/config.toml")).read_text())
    assert saved["algorithm"]["mu"] == 0.01 and saved["algorithm"]["weighting"] == "samples"
    assert {"patience", "gamma", "t_min"} <= set(saved["temperature"])

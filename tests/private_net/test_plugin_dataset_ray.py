"""A dataset named by import path (``dataset.name = "mod:build"``) under ``executor = "ray"`` with a local Ray: the dataset
is built once, in the driver, and the actors receive each client's rows from the object store, so they never import
the builder's module. Here they could not (its folder is off the driver's import path and working directory, which Ray
gives its workers), and the metrics are bitwise the sequential run's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("ray")

from chillfl.config import load_config  # noqa: E402
from chillfl.data.datasets import load_dataset  # noqa: E402
from chillfl.runner import run_experiment  # noqa: E402

MODULE = "ray_blob_data"
SOURCE = """
import numpy as np
import torch

from chillfl import ArrayDataset


def blobs(options, data_dir):
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 200)
    x = torch.from_numpy(rng.normal(2.0 * y[:, None], 1.0, (200, 8)).astype(np.float32))
    return ArrayDataset("blobs", x[:150], torch.from_numpy(y[:150]), x[150:], torch.from_numpy(y[150:]), 3)
"""


@pytest.fixture
def imported_then_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    folder = tmp_path / "plugin"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text(SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    load_dataset(f"{MODULE}:blobs")  # imported in the driver ...
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(folder)])  # ... then out of the workers' reach
    monkeypatch.chdir(tmp_path)
    yield
    sys.modules.pop(MODULE, None)


def test_a_plugin_dataset_under_a_local_ray_equals_sequential(imported_then_hidden: None) -> None:
    base = {
        "dataset.name": f"{MODULE}:blobs",
        "model.name": "mlp",
        "model.hidden": [16],
        "device": "cpu",
        "threads": 1,
        "seed": 2,
        "federation.num_clients": 4,
        "federation.clients_per_round": 2,
        "federation.rounds": 2,
        "client.batch_size": 16,
        "eval.client_split_size": 10,
    }
    records = {ex: run_experiment(load_config(None, {**base, "executor": ex}), write=False, progress=False).records for ex in ("sequential", "ray")}
    assert [r["global_loss"] for r in records["ray"]] == [r["global_loss"] for r in records["sequential"]]
    assert [r["train_loss"] for r in records["ray"]] == [r["train_loss"] for r in records["sequential"]]

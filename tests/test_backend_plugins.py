"""Plugins by import path, Local-only's kept optimiser state and APFL's own alpha step on the Flower backend, without
Ray: chillfl's Flower server (:func:`~chillfl.flower.apps.run_server`) drives the real ``ClientApp`` through an
in-process grid (each node's ``Context.state`` kept between rounds, as a SuperNode keeps it; two nodes, four clients).
Every metric of every round and ``client_models.safetensors`` are the sequential executor's, bit for bit
(docs/flower.md's promise). The same cases on a local Ray and under Flower's simulation engine:
``tests/private_net/test_plugins_on_backends.py``. Also here: how a local Ray's workers take the driver's import path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

from backend_plugin_cases import CASES, DEFAULTS, MODULES, config, write_modules
from chillfl.executors.ray_executor import adopt_import_path, driver_import_path
from chillfl.runner import CLIENT_MODELS, run_experiment


@pytest.fixture
def user_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The user's modules in a folder on ``sys.path`` (forgotten afterwards, so no other test imports this test's)."""
    folder = tmp_path / "user"
    folder.mkdir()
    write_modules(folder)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in MODULES:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("case", sorted(CASES))
def test_on_flowers_apps_equals_sequential(case: str, user_modules: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")
    from flwr.supercore.task_identity import TaskIdentity

    from chillfl.flower import client_app
    from chillfl.flower.apps import run_server
    from test_flower_privacy_attacks import InProcessGrid

    for attribute in ("_run_id", "_node_id", "_task_id"):  # what a ServerApp process has set before it builds a message
        monkeypatch.setattr(TaskIdentity, attribute, 1 if attribute == "_run_id" else 0)
    keep = {"checkpoint.client_models": True}
    seq = run_experiment(config(case, tmp_path / "seq", **keep), progress=False)
    flower_config = config(case, tmp_path / "flower", **keep)
    grid = InProcessGrid(client_app(flower_config), 2)
    out = run_server(flower_config, grid, min_nodes=2)
    assert grid.sent.count("train") == 2 * 3  # both nodes trained their clients each round
    assert out.records == seq.records  # every metric, floats compared exactly
    assert seq.folder is not None
    if case != "plugins":  # the personal models: the nodes' states, sent back after the last round
        assert (Path(out.folder) / CLIENT_MODELS).read_bytes() == (seq.folder / CLIENT_MODELS).read_bytes()
    if case in DEFAULTS:  # the option acts in these runs: the state a client keeps on its node changed its later rounds
        off = run_experiment(config(case, tmp_path / "off", **DEFAULTS[case]), write=False, progress=False).records
        assert off[0]["local_acc"] == seq.records[0]["local_acc"] and off != seq.records
    if case.startswith("local-kept"):  # Local-only's optimiser state lives on the nodes (never on the server)
        kept = [key for context in grid.contexts.values() for key in context.state.array_records.get("chillfl.client.0", {}).keys()]
        assert "own.local_opt.steps" in kept


def test_a_local_rays_workers_import_from_the_drivers_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A worker's ``sys.path`` becomes the driver's, in the driver's order (``""``, the driver's working directory, spelt
    out), then the worker's own other entries: a folder a script put on its path is found there too."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", ["", "/user/plugins", "/lib/python"])
    driver = driver_import_path()
    assert driver == [os.getcwd(), "/user/plugins", "/lib/python"]
    monkeypatch.setattr(sys, "path", ["/ray/worker", "/lib/python", "/ray/session"])  # a Ray worker's own
    adopt_import_path(driver)
    assert sys.path == [os.getcwd(), "/user/plugins", "/lib/python", "/ray/worker", "/ray/session"]

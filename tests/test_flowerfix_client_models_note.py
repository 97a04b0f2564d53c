"""The note that a method keeps no model per client (``checkpoint.client_models``) is logged once per Flower run, by the
server that acts on it, not again by every ClientApp that builds its parts from the run's config (a simulation printed
it once per ClientApp actor: "[repeated 5x across cluster]"). The ServerApp runs in this process over the in-process
grid of tests/test_flower_privacy_attacks.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from test_flower_privacy_attacks import BASE, NODES, InProcessGrid, server_identity  # noqa: E402,F401  (a fixture)

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.flower import client_app  # noqa: E402
from chillfl.flower.apps import run_server  # noqa: E402

NOTE = "checkpoint.client_models: fedavg keeps no model per client"


@pytest.mark.usefixtures("server_identity")
def test_the_client_models_note_comes_from_the_server_alone(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = config_from_dict({**BASE, "out_dir": str(tmp_path), "name": "note", "algorithm": {"name": "fedavg"},
                               "federation": {**BASE["federation"], "rounds": 1}, "checkpoint": {"every": 0, "client_models": True}})
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        out = run_server(config, InProcessGrid(client_app(config), NODES), min_nodes=NODES)
    assert len(out.records) == 1
    notes = [r.getMessage() for r in caplog.records if NOTE in r.getMessage()]
    assert len(notes) == 1, notes

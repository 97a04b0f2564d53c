"""The Flower ServerApp watches each round's losses as ``chillfl run`` does (:class:`~chillfl.engine.health.LossWatch`).

Before, its round loop observed nothing: with ``client.lr = 30`` and ``strict = true`` ``chillfl run`` stopped at
round 1 as diverged (``NAME.failed``, exit 3) while the Flower run finished and kept a normal folder, and without
``strict`` it said none of the loss-health warning lines. The Flower run here is chillfl's own ServerApp body
(:func:`~chillfl.flower.apps.run_server`) over the in-process grid of tests/test_flower_privacy_attacks.py.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

from test_flower_privacy_attacks import BASE, NODES, InProcessGrid, server_identity  # noqa: E402,F401  (a fixture)

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.errors import Diverged  # noqa: E402
from chillfl.flower import client_app  # noqa: E402
from chillfl.flower.apps import run_server  # noqa: E402
from chillfl.runner import run_experiment  # noqa: E402

HEALTH = "chillfl.engine.health"


def _config(out: Path, strict: bool) -> Any:
    """Round 1's training loss is far above the ceiling at this step size (digits, an MLP)."""
    return config_from_dict({**BASE, "out_dir": str(out), "name": "run", "strict": strict, "client": {**BASE["client"], "lr": 30.0},
                             "federation": {**BASE["federation"], "rounds": 2}})


def _on_flower(config: Any) -> Any:
    return run_server(config, InProcessGrid(client_app(config), NODES), min_nodes=NODES)


@pytest.mark.usefixtures("server_identity")
def test_a_strict_flower_run_stops_as_diverged_where_chillfl_run_does(tmp_path: Path) -> None:
    with pytest.raises(Diverged) as own:
        run_experiment(_config(tmp_path / "own", True), progress=False)
    with pytest.raises(Diverged) as flower:
        _on_flower(_config(tmp_path / "fl", True))
    assert str(flower.value) == str(own.value) and flower.value.round == 1
    assert "training loss" in str(flower.value)
    assert sorted(p.name for p in (tmp_path / "fl").iterdir()) == ["run.failed"]
    failures = [json.loads((tmp_path / side / "run.failed" / "failure.json").read_text()) for side in ("own", "fl")]
    assert failures[1]["round"] == failures[0]["round"] == 1 and failures[1]["what"] == failures[0]["what"]


@pytest.mark.usefixtures("server_identity")
def test_a_flower_run_says_the_loss_warning_chillfl_run_says(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=HEALTH):
        run_experiment(_config(tmp_path / "own", False), progress=False)
    own = [r.getMessage() for r in caplog.records if r.name == HEALTH]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=HEALTH):
        out = _on_flower(_config(tmp_path / "fl", False))
    flower = [r.getMessage() for r in caplog.records if r.name == HEALTH]
    assert len(out.records) == 2  # not strict: the run goes on
    assert flower == own and len(own) >= 1
    assert any("round 1: training loss" in m and "the run goes on" in m for m in flower)

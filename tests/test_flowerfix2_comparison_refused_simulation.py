"""``run_simulation`` refuses a comparison's config (tests/test_flowerfix2_comparison_refused.py) before Flower starts,
and writes nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flwr", reason="the Flower backend needs the [flower] extra (flwr)")

import flwr.simulation  # noqa: E402

from chillfl.config import config_from_dict  # noqa: E402
from chillfl.errors import ConfigError  # noqa: E402
from chillfl.flower import run_simulation  # noqa: E402


def test_run_simulation_refuses_it_before_flower_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flwr.simulation, "run_simulation", lambda **kwargs: pytest.fail("Flower started"))
    with pytest.raises(ConfigError, match="compare.seeds"):
        run_simulation(config_from_dict({"out_dir": str(tmp_path), "compare": {"seeds": [0, 1]}}), num_supernodes=2)
    assert not any(tmp_path.iterdir())

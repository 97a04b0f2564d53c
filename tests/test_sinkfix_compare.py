"""``chillfl compare`` checks its runs' sink packages before anything is written or built (check_runs)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from chillfl.config import load_config
from chillfl.errors import MissingExtra
from test_sinks import TINY


def test_a_missing_sink_package_stops_a_comparison_before_its_first_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The comparison said ``run 1 of 2`` (and built its data) before the first run's start found the package missing."""
    from chillfl.sweeps.run import run_compare

    monkeypatch.setitem(sys.modules, "wandb", None)  # import of a None entry raises ModuleNotFoundError, as if not installed
    config = load_config(None, {**TINY, "out_dir": str(tmp_path / "results"), "log.sinks": ["csv", "wandb"]})
    with caplog.at_level(logging.INFO, logger="chillfl"), pytest.raises(MissingExtra) as info:
        run_compare(config, ["client.lr=0.05,0.1"], progress=False)
    assert str(info.value) == 'wandb is needed for W&B logs: pip install "chillfl[wandb]"'
    assert not [r for r in caplog.records if "run 1 of 2" in r.getMessage()]
    assert not (tmp_path / "results").exists()


def test_a_comparison_not_written_needs_no_sink_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``write=False`` builds no sink (no folder to write them into), so their packages are not asked for."""
    from chillfl.sweeps.run import run_compare

    monkeypatch.setitem(sys.modules, "wandb", None)
    config = load_config(None, {**TINY, "federation.rounds": 1, "out_dir": str(tmp_path / "results"), "log.sinks": ["wandb"]})
    result = run_compare(config, ["client.lr=0.05,0.1"], progress=False, write=False)
    assert result.folder is None and len(result.rows) == 2

"""``log.sinks`` under ``write=False`` is said in one warning line (apifix2, pyapi #8): every sink writes from the
run's folder, so a run writing none logged nowhere without a word, where a user had asked for W&B or MLflow precisely
to keep the numbers somewhere."""

from __future__ import annotations

import logging
import sys

import pytest

from chillfl.config import load_config
from chillfl.runner import run_experiment
from test_sinks import TINY


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "log.sinks" in r.getMessage()]


def test_sinks_of_a_run_not_written_are_said_to_be_ignored(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # not asked for: nothing is built
    config = load_config(None, {**TINY, "federation.rounds": 1, "log.sinks": ["csv", "wandb"]})
    with caplog.at_level(logging.WARNING, "chillfl"):
        run_experiment(config, write=False, progress=False)
    said = _said(caplog)
    assert len(said) == 1 and "write=False" in said[0] and "'csv', 'wandb'" in said[0] and "\n" not in said[0]


def test_no_sinks_no_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "chillfl"):
        run_experiment(load_config(None, {**TINY, "federation.rounds": 1}), write=False, progress=False)
    assert not _said(caplog)

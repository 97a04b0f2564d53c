"""A signal in a run's last round: the run completes, then InterruptedAfterRun ends chillfl.run; it carries the
complete run (``output``: the RunOutput, ``result``: the Result the call would have returned)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch import nn

import chillfl
from tiny_user_run import tiny_data
from chillfl.errors import InterruptedAfterRun

CONFIG = {"federation": {"num_clients": 3, "rounds": 2}, "client": {"batch_size": 16}}


def last_round_ctrl_c() -> tuple[nn.Module, Callable[[dict[str, object]], None]]:
    """A seeded tiny model, and a callback that sends SIGINT in round 2 of :data:`CONFIG`'s 2 (the last)."""
    torch.manual_seed(0)

    def ctrl_c(record: dict[str, object]) -> None:
        if record["round"] == 2:
            signal.raise_signal(signal.SIGINT)

    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)), ctrl_c


def test_a_signal_in_the_last_round_keeps_the_result(tmp_path: Path) -> None:
    model, ctrl_c = last_round_ctrl_c()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as a notebook has (a test worker's may be another)
    try:
        with pytest.raises(InterruptedAfterRun) as err:
            chillfl.run(model=model, data=tiny_data(), config=CONFIG, out_dir=tmp_path, name="last", progress=False, callbacks=[ctrl_c])
    finally:
        signal.signal(signal.SIGINT, previous)
    exc = err.value
    assert exc.folder == tmp_path / "last" and (exc.folder / "summary.json").is_file()
    assert exc.output is not None and len(exc.output.records) == 2
    result = exc.result
    assert isinstance(result, chillfl.Result) and result.folder == exc.folder and len(result.records) == 2
    assert isinstance(result.model, nn.Sequential) and result.model is not model

"""Ctrl-C in the last round of a run inside ``asyncio.run``: asyncio's SIGINT handler, which chillfl displaced and passes
the held signal on to, cancels the task instead of raising, which dropped the finished run's return value (a bare
KeyboardInterrupt came out). chillfl raises InterruptedAfterRun itself, carrying the Result, as python-api.md promises."""

from __future__ import annotations

import asyncio
import signal

import torch
from torch import nn

import chillfl
from chillfl.errors import InterruptedAfterRun
from tiny_user_run import tiny_data


def test_a_ctrl_c_in_the_last_round_under_asyncio_run_keeps_the_result() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    config = {"federation": {"num_clients": 3, "rounds": 2}, "client": {"batch_size": 16}}

    def ctrl_c(record: dict[str, object]) -> None:
        if record["round"] == 2:
            signal.raise_signal(signal.SIGINT)

    async def cell() -> chillfl.Result:
        return chillfl.run(model=model, data=tiny_data(), config=config, write=False, progress=False, callbacks=[ctrl_c])

    caught: KeyboardInterrupt | None = None
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # asyncio.run installs its own only over Python's
    try:
        try:
            asyncio.run(cell())
        except KeyboardInterrupt as exc:  # caught here, not by pytest.raises: a bare one would end the whole session
            caught = exc
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # asyncio gave Python's back
    finally:
        signal.signal(signal.SIGINT, previous)
    assert isinstance(caught, InterruptedAfterRun), repr(caught)
    result = caught.result
    assert caught.folder is None and isinstance(result, chillfl.Result) and len(result.records) == 2

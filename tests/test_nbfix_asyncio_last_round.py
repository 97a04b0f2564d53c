"""Ctrl-C in the last round of a run inside ``asyncio.run``: asyncio's SIGINT handler, which chillfl displaced and passes
the held signal on to, cancels the task instead of raising, which dropped the finished run's return value (a bare
KeyboardInterrupt came out). chillfl raises InterruptedAfterRun itself, carrying the Result, as python-api.md promises."""

from __future__ import annotations

import asyncio
import signal

import chillfl
from chillfl.errors import InterruptedAfterRun
from test_procfix_interrupted_after_run import CONFIG, last_round_ctrl_c
from tiny_user_run import tiny_data


def test_a_ctrl_c_in_the_last_round_under_asyncio_run_keeps_the_result() -> None:
    model, ctrl_c = last_round_ctrl_c()

    async def cell() -> chillfl.Result:
        return chillfl.run(model=model, data=tiny_data(), config=CONFIG, write=False, progress=False, callbacks=[ctrl_c])

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


def test_a_users_own_sigint_handler_that_returns_decides_and_the_run_returns() -> None:
    # only asyncio.run's handler (it cancels the task) is answered with InterruptedAfterRun; a handler of the user's
    # that sets a stop flag and returns gets the Result back, as before (rev117e 1)
    model, ctrl_c = last_round_ctrl_c()
    flagged: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda sig, frame: flagged.append(sig))
    try:
        result = chillfl.run(model=model, data=tiny_data(), config=CONFIG, write=False, progress=False, callbacks=[ctrl_c])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert flagged == [signal.SIGINT] and isinstance(result, chillfl.Result) and len(result.records) == 2

"""Runs in threads of one process share torch's precision settings: a refused run names the other run's precision."""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Any, Callable

import torch

from chillfl.errors import ConfigError
from chillfl.training.local import run_precision


def _in_thread(enter: Callable[[], AbstractContextManager[Any]]) -> BaseException | None:
    """``enter()``'s context entered in another thread: the exception it raised, or None."""
    caught: list[BaseException] = []

    def go() -> None:
        try:
            with enter():
                pass
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            caught.append(exc)

    t = threading.Thread(target=go)
    t.start()
    t.join(60)
    return caught[0] if caught else None



def test_the_precision_refusal_names_the_other_threads_differing_precision() -> None:
    cpu = torch.device("cpu")
    with run_precision("tf32", cpu), run_precision("fp32", cpu):  # an fp32 run nested in a tf32 one (its callback)
        exc = _in_thread(lambda: run_precision("fp32", cpu))
    assert isinstance(exc, ConfigError) and exc.field == "precision"
    assert "computes in 'tf32'" in str(exc)

"""The TensorBoard sinks' filter of their writer threads' errors (``threading.excepthook``) is off once every sink has
closed, in whatever order they close.

Before: each sink installed a hook of its own; two open at once and closed in the order they opened (A, then B) left
A's hook installed after both had closed (B put back the hook it found, A's), and every later OSError of a TensorBoard
thread in the process was logged at debug level only, never printed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorboard")

from chillfl.sinks import TensorBoardSink  # noqa: E402


@pytest.mark.parametrize("order", ["opened", "reversed"])
def test_the_hook_found_is_back_once_both_sinks_are_closed(tmp_path: Path, order: str) -> None:
    found = threading.excepthook
    a, b = TensorBoardSink(tmp_path / "a"), TensorBoardSink(tmp_path / "b")
    assert threading.excepthook is not found  # the filter is on while they are open
    for sink in (a, b) if order == "opened" else (b, a):
        sink.close()
    assert threading.excepthook is found


class _WriterThread(threading.Thread):
    """Stands for TensorBoard's writer thread (the filter knows it by its class's module)."""


_WriterThread.__module__ = "tensorboard.summary.writer.event_file_writer"


def _args(exc: BaseException) -> Any:
    return threading.ExceptHookArgs((type(exc), exc, None, _WriterThread()))  # type: ignore[attr-defined]


def test_a_hook_installed_over_it_is_served_and_the_filter_is_off_once_the_sinks_are_closed(tmp_path: Path) -> None:
    """Another library's hook installed while a sink is open stays on top; the filter under it passes a writer thread's
    OSError on once its sink has closed, also after another sink has opened and closed over that hook (printed once)."""
    found = threading.excepthook
    printed: list[BaseException | None] = []
    threading.excepthook = lambda args: printed.append(args.exc_value)
    try:
        a = TensorBoardSink(tmp_path / "a")
        under = threading.excepthook
        threading.excepthook = other = lambda args: under(args)  # noqa: E731
        other(_args(OSError("open")))
        assert printed == []  # filtered while a sink is open
        a.close()
        assert threading.excepthook is other
        b = TensorBoardSink(tmp_path / "b")
        b.close()
        failure = OSError("closed")
        other(_args(failure))
        assert printed == [failure]
    finally:
        threading.excepthook = found

"""Warnings a process says once: a comparison builds many runs from one config, and ``chillfl list`` asks each
part for its plugins, so the same advice would otherwise print once a run or once a part.

One set for the whole package (tests start each test with it empty: :func:`forget`), keyed by the logger's name and
the message, or by a key the caller gives when the advice is the same but its numbers differ from run to run.
"""

from __future__ import annotations

import logging

_SAID: set[tuple[str, str]] = set()


def warn_once(log: logging.Logger, message: str, key: str | None = None) -> bool:
    """``message`` as a warning on ``log`` the first time this process says it (or anything under ``key``); whether it did."""
    said = (log.name, message if key is None else key)
    if said in _SAID:
        return False
    _SAID.add(said)
    log.warning("%s", message)
    return True


def forget() -> None:
    """Nothing said yet: what a test sees on stderr must not depend on which tests ran before it in the process."""
    _SAID.clear()

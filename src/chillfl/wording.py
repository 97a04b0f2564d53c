"""Counts in the lines chillfl says: ``1 run``, ``2 runs``, never ``1 runs`` or ``run(s)``."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in the number ``n`` takes (``plural``: where it is not ``noun + "s"``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"

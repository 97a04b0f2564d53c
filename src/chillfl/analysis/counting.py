"""An analysis's progress on stderr: ``chillfl: WHAT: [k/N] ...`` plain lines (no ``\\r``), one per run or arm, or nothing at ``-q``.

Why: an analysis over several run folders (calibration, cka, ...) computed every run before it printed a word
(minutes at scale), and a bar redrawn with ``\\r`` piles up into one huge line in a log file. A counted line
is readable on a terminal and in a log alike. It starts with ``chillfl:`` as every other line chillfl says on stderr
does (a round's progress line, a note, an error): a log filtered on that prefix lost exactly these lines.
"""

from __future__ import annotations

import time
from typing import Callable

from chillfl.progress import Lines, format_seconds
from chillfl.stderr import say

PREFIX = "chillfl: "
"""What every line chillfl says on stderr starts with (the CLI's log lines get it from their formatter)."""


class Counted:
    """``chillfl: WHAT: [k/N] TEXT (elapsed, ETA ...)`` lines; ``on=False`` says nothing. ``clock`` is injectable (tests)."""

    def __init__(self, total: int, what: str, on: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.what, self.on, self.clock = total, what, on, clock
        self.k = 0
        self.start = clock()

    def eta(self, done: int, elapsed: float) -> str:
        """The time left for the ``total - done`` items still to come, at the mean time of the ``done`` ones ('' before the first)."""
        if done <= 0 or done >= self.total:
            return ""
        return f"ETA {format_seconds(elapsed / done * (self.total - done))}"

    def starting(self, text: str) -> str:
        """The line for the next item as it starts (a long arm); its ETA counts it and those after it."""
        self.k += 1
        eta = self.eta(self.k - 1, self.clock() - self.start)
        return self._say(f"{PREFIX}{self.what}: [{self.k}/{self.total}] {text}" + (f" ({eta})" if eta else ""))

    def finished(self, text: str) -> str:
        """The line for an item that has just ended; said only where there are several (of one, the results line says it)."""
        self.k += 1
        elapsed = self.clock() - self.start
        eta = self.eta(self.k, elapsed)
        return self._say(f"{PREFIX}{self.what}: [{self.k}/{self.total}] {text} ({format_seconds(elapsed)}{', ' + eta if eta else ''})", self.total > 1)

    def _say(self, line: str, due: bool = True) -> str:
        """The line as said (prefix included). Why ``due``: a lone run's line came just before the results (and before a bad
        option's one-line error)."""
        if self.on and due:
            say(line)
        return line


class ItemLines(Lines):
    """:class:`chillfl.progress.Lines` (a line after the first item, every 30 s and at the end) counting ``unit`` items, not rounds."""

    def __init__(self, total: int, desc: str, unit: str) -> None:
        super().__init__(total, 0, desc)
        self.unit = unit

    def line(self, now: float) -> str:
        elapsed = now - self.start
        values = "".join(f" {k}={v}" for k, v in self.postfix.items())
        return f"{self.desc}: {self.unit} {self.n}/{self.total}{values} ({format_seconds(elapsed)}{self.eta(now)})"

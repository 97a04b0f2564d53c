"""Progress of a run: a tqdm bar on a terminal, periodic plain lines in logs, or nothing.

A ``\\r``-redrawn bar written to a file or a CI log piles up into one huge line
of updates; where stderr is not a terminal the CLI asks for ``"lines"``
instead: one ``chillfl: NAME round r/R ...`` line after the first round this
process trains (so a log shows at once that rounds run, and how long that
first one took: not after :data:`LINE_EVERY_S` seconds of silence), then every
:data:`LINE_EVERY_S` seconds and at the last round, or every round at ``-v``.
The ETA is measured from the end of that first round: the first round's time
holds the start-up (workers importing torch, a checkpoint restored) and gave
"ETA 1h36m" for a run of 72 s.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import unicodedata
from typing import Any, Literal, Union

from tqdm import tqdm
from tqdm.utils import disp_len

from chillfl.stderr import say, thread_lock

ProgressMode = Literal["bar", "lines", "off"]
Progress = Union[bool, ProgressMode]
"""What run functions take: True = ``"bar"`` where stderr shows one (a terminal, a Jupyter cell), else ``"lines"``;
False = ``"off"`` (:func:`as_mode`)."""
LINE_EVERY_S = 30.0

log = logging.getLogger("chillfl.progress")


def mode_for(quiet: bool, stream: Any = None) -> ProgressMode:
    """The CLI's choice: nothing when quiet, a bar on a terminal, plain lines otherwise. A terminal that reports 0 columns
    (a pty whose size was never set: ``script``, ``expect``, some CI runners) gets lines: tqdm drew an empty bar there,
    and the run showed no progress at all."""
    if quiet:
        return "off"
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return "bar" if callable(isatty) and isatty() and terminal_columns(stream) != 0 else "lines"


def terminal_columns(stream: Any) -> int | None:
    """The width the terminal behind ``stream`` reports; None where it has no file descriptor or no size to read (a
    stand-in stream: tqdm then draws at its default width)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None


def as_mode(progress: Progress, stream: Any = None) -> ProgressMode:
    """``progress`` as a mode: True is a bar where ``stream`` (stderr) redraws one, a terminal or a Jupyter cell, and plain
    lines elsewhere: a script's stderr redirected to a file got every ``\\r`` redraw of the bar, as the CLI's did before
    :func:`mode_for`."""
    if progress is True:
        stream = sys.stderr if stream is None else stream
        return "bar" if mode_for(False, stream) == "bar" or in_jupyter(stream) else "lines"
    if progress is False:
        return "off"
    return progress


def in_jupyter(stream: Any) -> bool:
    """Whether ``stream`` is a Jupyter kernel's output stream (ipykernel's ``OutStream``: no terminal, yet the notebook
    redraws a ``\\r`` bar in place)."""
    kernel = sys.modules.get("ipykernel.iostream")
    kind = getattr(kernel, "OutStream", None) if "ipykernel" in sys.modules else None
    return isinstance(kind, type) and isinstance(stream, kind)


class NoBar:
    """The bar of ``progress = "off"``: tqdm's interface, doing nothing. ``tqdm(disable=True)`` still started tqdm's
    monitor thread, which outlived the run."""

    def __enter__(self) -> NoBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def set_postfix(self, values: dict[str, str], refresh: bool = False) -> None:
        return None

    def update(self, n: int = 1) -> None:
        return None

    def close(self) -> None:
        return None


class Lines:
    """tqdm's small interface used by the runner (update, set_postfix, a context), as plain log lines."""

    def __init__(self, total: int, initial: int, desc: str, every_s: float = LINE_EVERY_S) -> None:
        self.total, self.n, self.desc, self.every_s = total, initial, desc, every_s
        self.start = self.last = time.monotonic()
        self.done_at_start = initial
        self.paced_from: tuple[float, int] | None = None  # (time, rounds) at the end of the first round trained here
        self.postfix: dict[str, str] = {}

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def set_postfix(self, values: dict[str, str], refresh: bool = False) -> None:
        self.postfix = dict(values)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        first = self.n - n == self.done_at_start  # the first round trained here: its line gives the pace and an ETA
        due = first or now - self.last >= self.every_s or self.n >= self.total or log.isEnabledFor(logging.DEBUG)
        if first:
            self.paced_from = (now, self.n)
        if due:
            self.last = now
            if log.isEnabledFor(logging.INFO):  # the command line's log (its -q turns progress off altogether)
                log.info("%s", self.line(now))
            else:  # from Python, where nothing set logging up and INFO goes nowhere: "lines" was asked for, so said
                say(self.line(now))

    def line(self, now: float) -> str:
        elapsed = now - self.start
        values = "".join(f" {k}={v}" for k, v in self.postfix.items())
        return f"{self.desc} round {self.n}/{self.total}{values} ({format_seconds(elapsed)}{self.eta(now)})"

    def eta(self, now: float) -> str:
        """``", ETA 3m10s"`` at the pace since the end of the first round trained here; ``""`` before a second round."""
        if self.paced_from is None or self.n >= self.total:
            return ""
        since, rounds = self.paced_from
        rate = (self.n - rounds) / (now - since) if now > since else 0.0
        return f", ETA {format_seconds((self.total - self.n) / rate)}" if rate > 0 else ""


def make_bar(progress: Progress, total: int, initial: int, desc: str) -> tqdm | Lines | NoBar:
    mode = as_mode(progress)
    if mode == "lines":
        return Lines(total, initial, desc)
    if mode == "off":
        return NoBar()
    thread_lock(tqdm)  # not tqdm's default lock, which fixes multiprocessing's start method (chillfl.stderr.ThreadLock)
    return FittedBar(total=total, initial=initial, desc=desc, unit="round", leave=True, dynamic_ncols=True)


BAR_MIN = 10
"""The narrowest bar drawn: a bar of a few characters says nothing, and the room is better given to a number."""

ELLIPSIS = "~"
"""Where a shortened name was cut: ASCII, so that a bar written to a stream that cannot encode an ellipsis (a
Python caller's ASCII stderr, the CLI's streams aside) does not fail."""


class FittedBar(tqdm):
    """tqdm's bar fitted to the terminal's width by leaving out whole parts, never by cutting the line: tqdm cut the line
    at the width, mid-number (``local_acc=0.4`` for 0.4700 at 80 columns), and at 40 columns a long run name was all
    that showed. What shows, in this order while it fits (:func:`fitted_meter`): the name (shortened in the middle) and
    the round count always, then the time and ETA, the postfix's fields in their order (the runner puts the most
    important first), the bar, the rate. With room for all of it, the line is tqdm's own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.fields: list[tuple[str, str]] = []
        super().__init__(*args, **kwargs)

    def set_postfix(self, ordered_dict: Any = None, refresh: bool | None = True, **kwargs: Any) -> None:
        self.fields = [(str(k), str(v).strip()) for k, v in {**dict(ordered_dict or {}), **kwargs}.items()]
        super().set_postfix(ordered_dict, refresh, **kwargs)

    @property
    def format_dict(self) -> dict[str, Any]:
        meter = dict(super().format_dict)
        if meter.get("ncols"):
            meter.update(fitted_meter(meter, self.fields, int(meter["ncols"])))
        return meter


def fitted_meter(meter: dict[str, Any], fields: list[tuple[str, str]], width: int) -> dict[str, Any]:
    """The ``prefix``, ``postfix`` and ``bar_format`` of tqdm's ``meter`` (its ``format_dict``) that fit ``width``
    columns (:class:`FittedBar`). Each candidate is measured as tqdm renders it, a bar at :data:`BAR_MIN` wide.
    Widths are screen columns (``disp_len``): a CJK character takes two."""
    name = shortened(str(meter.get("prefix") or ""), max(8, width // 3))

    def line(parts: dict[str, bool], kept: list[tuple[str, str]], label: str) -> tuple[int, dict[str, Any]]:
        layout = {"prefix": label, "postfix": ", ".join(f"{k}={v}" for k, v in kept), "bar_format": bar_format(**parts)}
        text = tqdm.format_meter(**{**meter, **layout, "ncols": None})  # a bar is 10 wide without ncols
        return disp_len(text) - (10 - BAR_MIN if parts["bar"] else 0), layout

    parts = {"time": False, "bar": False, "rate": False}
    size, layout = line(parts, [], name)
    if size > width:  # the name and the count alone are too long: the name shortened to what is left, the count whole
        name = shortened(name, max(1, disp_len(name) - (size - width)))
        return line(parts, [], name)[1]
    kept: list[tuple[str, str]] = []
    for part in ("time", *range(len(fields)), "bar", "rate"):
        if isinstance(part, int):  # a field, only after every one before it (the least important go first)
            if len(kept) == part and line(parts, fields[:part + 1], name)[0] <= width:
                kept = fields[:part + 1]
        elif line({**parts, part: True}, kept, name)[0] <= width:  # (the rate is drawn only beside the time: bar_format)
            parts[part] = True
    return line(parts, kept, name)[1]


def bar_format(time: bool, bar: bool, rate: bool) -> str:
    """tqdm's ``bar_format`` with the parts chosen; with all three it is tqdm's default line (``l_bar``, bar, ``r_bar``)."""
    layout = "{desc}: " + ("{percentage:3.0f}%|{bar}| " if bar else "") + "{n_fmt}/{total_fmt}"
    if time:
        return layout + " [{elapsed}<{remaining}" + (", {rate_fmt}" if rate else "") + "{postfix}]"
    return layout + "{postfix}"


def shortened(name: str, columns: int) -> str:
    """``name`` in at most ``columns`` screen columns, cut in the middle: a run name's start and its end (a seed, a
    variant's option) both tell runs apart. Columns, not characters: a CJK character takes two, and a name cut to a
    third of the width in characters took two thirds of it in columns and left no room for a field. Neither side ends
    inside a cluster drawn as one character (an accented letter, a ZWJ emoji, a flag: :func:`_splits`): it gives up the
    cluster instead."""
    if disp_len(name) <= columns:
        return name
    head = columns // 2
    cut = len(_fitting(name, head))
    start = len(name) - len(_fitting(name[::-1], columns - 1 - head))
    while _splits(name, cut):  # each side loses the character it would have split off, so stays within its columns
        cut -= 1
    while _splits(name, start):
        start += 1
    return name[:cut] + ELLIPSIS + name[start:]


_ZWJ = "\u200d"  # zero-width joiner: joins emoji into one (a ZWJ sequence)


def _splits(text: str, at: int) -> bool:
    """Whether cutting ``text`` before ``text[at]`` splits a grapheme-ish cluster: a mark from its base (``e`` +
    U+0301), a ZWJ sequence (``👩‍💻``: U+1F469 ZWJ U+1F4BB), a variation selector, skin tone or tag from its emoji, or a
    flag's two regional indicators. Why: the cut name showed a lone accent, or a half emoji, beside the ``~``. Not
    the full UAX #29 rules (no dependency for them): the common clusters of a run name."""
    if at <= 0 or at >= len(text):
        return False
    if _continues(text[at]) or text[at - 1] == _ZWJ:
        return True
    if _regional(text[at - 1]) and _regional(text[at]):  # inside a pair: an odd number of indicators before the cut
        run = next((n for n in range(at) if not _regional(text[at - 1 - n])), at)
        return run % 2 == 1
    return False


def _continues(ch: str) -> bool:
    """Whether ``ch`` belongs to the character before it: a mark (``unicodedata.combining``, or a spacing or
    enclosing mark, whose combining class is 0: Devanagari's vowel signs, the keycap), a ZWJ, a variation selector, an
    emoji skin tone or a tag character."""
    code = ord(ch)
    return (bool(unicodedata.combining(ch)) or unicodedata.category(ch).startswith("M") or ch == _ZWJ
            or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F)


def _regional(ch: str) -> bool:
    """A regional indicator: two of them make a flag."""
    return 0x1F1E6 <= ord(ch) <= 0x1F1FF


def _fitting(text: str, columns: int) -> str:
    """The longest start of ``text`` that takes at most ``columns`` screen columns."""
    used = 0
    for i, ch in enumerate(text):
        used += disp_len(ch)
        if used > columns:
            return text[:i]
    return text


def format_seconds(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``4000`` -> ``1h06m``."""
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"

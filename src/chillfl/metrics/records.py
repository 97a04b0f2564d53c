"""Reading a run's ``metrics.jsonl`` for the ``python -m chillfl.metrics.*`` tables, with one-line errors.

A folder given on their command line may be mistyped, hold no run, or hold a
file cut short by a crash; each of these is a :class:`~chillfl.errors.ConfigError`
naming the folder or the file and line, which :func:`run_tool` prints as one
line with exit status 2 (as ``chillfl`` does), before anything is printed.
A non-finite value reads back as the float it was (:func:`~chillfl.storage.jsonl.decode_record`, the one decoder).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chillfl.errors import ConfigError, json_loads
from chillfl.paths import CLAIM, FAILED, PARTIAL
from chillfl.storage.jsonl import decode_record

METRICS = "metrics.jsonl"
UNFINISHED = (PARTIAL, FAILED)
"""The suffixes of unfinished run folders (from :mod:`chillfl.paths`: :mod:`chillfl.storage.results` would import torch)."""


def client_order(sub: object) -> tuple[int, int, str]:
    """A sort key for a table's client ids: whole numbers (``3``, ``"3"``) first, in number order, then any other key as
    text. One order for every output that lists clients (``metrics_clients.csv``, summary.json's stability), whether
    the ids are ints (a run's records in memory) or the sorted strings ``metrics.jsonl`` reads back (``"10"`` before ``"2"``)."""
    text = str(sub)
    try:
        number = int(text)
    except ValueError:
        return (1, 0, text)
    return (0, number, text) if str(number) == text else (1, 0, text)


def unfinished(path: Path, under: Path) -> bool:
    """Whether ``path`` lies in a ``NAME.partial`` / ``NAME.failed`` folder below ``under`` (named ``under`` itself, it is
    taken): a compare table leaves those runs out of its statistics, and so do these tables (as the HTML report does)."""
    return any(suffix in part for part in path.relative_to(under).parts[:-1] for suffix in UNFINISHED) or any(
        part.startswith(CLAIM) for part in path.relative_to(under).parts[:-1])  # a killed claimer's hidden folder


def read_records(path: Path) -> list[dict[str, Any]]:
    """The round records of a ``metrics.jsonl``, decoded (:func:`~chillfl.storage.jsonl.decode_record`: a NaN loss is NaN,
    not None); a line that is not a JSON object, or whose non-finite marker is garbled, is a ConfigError naming file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read it: {type(exc).__name__}: {exc}") from None
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json_loads(line)
        except ValueError as exc:
            raise ConfigError(str(path), f"line {number} is not JSON ({exc})") from None
        if not isinstance(record, dict):
            raise ConfigError(str(path), f"line {number} is not a round record (a JSON object)")
        try:
            records.append(decode_record(record))
        except ValueError as exc:
            raise ConfigError(str(path), f"line {number}: {exc}") from None
    return records


def run_folders(folder: Path) -> list[Path]:
    """``folder`` itself when it holds a ``metrics.jsonl``, else its sub-folders that do (a compare folder), sorted,
    without the unfinished ones (:func:`unfinished`)."""
    if not folder.is_dir():
        raise ConfigError(str(folder), "is not a folder (give run folders or compare folders)")
    if (folder / METRICS).is_file():
        return [folder]
    runs = sorted(p.parent for p in folder.glob(f"*/{METRICS}") if not unfinished(p, folder))
    if not runs:
        raise ConfigError(str(folder), f"holds no run: no {METRICS} in it or in its sub-folders")
    return runs


def run_tool(prog: str, body: Callable[[], Sequence[str]]) -> int:
    """Print the lines ``body`` returns (exit 0), or its ConfigError as one line on stderr (exit 2) with nothing on stdout."""
    try:
        lines = body()
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0

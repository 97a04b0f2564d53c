"""One label per input in an analysis's tables, plots and JSON keys (:func:`unique_label`).

Why a module of its own: the run folders' labels (:func:`chillfl.analysis.replay.run_label`) and ``soft-label-entropy``'s
files (:func:`chillfl.analysis.cache_ratio.soft_label_names`) are told apart by one rule, and the latter must not import
the replay's torch-heavy module to get it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from chillfl.errors import one_line


def _tail(path: Path, k: int) -> str:
    """The last ``k`` parts of ``path`` as printed (the whole path where it has no more)."""
    return one_line(str(path) if k >= len(path.parts) else "/".join(path.parts[-k:]))


def ends_with(path: Path, label: str) -> bool:
    """Whether ``label`` reads as a tail of ``path`` (its name, ``parent/name``, ..., as :func:`unique_label` prints one):
    a label that some other file ends with names that file to a reader."""
    return any(_tail(path, k) == label for k in range(1, len(path.parts) + 1))


def unique_label(path: Path, others: Iterable[Path]) -> str:
    """The shortest tail of ``path`` (its name, then ``parent/name``, ...) that no path of ``others`` ends with, as printed;
    the whole path where none is shorter. Names are compared as printed (control characters escaped: ESC sequences drove
    the terminal), so that "a<ESC>" and a folder literally named "a\\x1b" are told apart by their parents rather than
    merged under one label. Paths printed alike in full (only such an escape tells them apart) get ``[1]``, ``[2]``...
    in the order of their resolved paths: still one label each."""
    others = [o for o in others if o != path]
    for k in range(1, len(path.parts) + 1):
        label = _tail(path, k)
        if not any(_tail(o, k) == label for o in others):
            return label
    alike = sorted([path, *(o for o in others if _tail(o, len(o.parts)) == label)], key=str)
    return f"{label}[{alike.index(path) + 1}]"

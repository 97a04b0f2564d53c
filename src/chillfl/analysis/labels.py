"""One label per input in an analysis's tables, plots and JSON keys (:func:`unique_label`).

Why a module of its own: the run folders' labels (:func:`chillfl.analysis.replay.run_label`) and ``soft-label-entropy``'s
files (:func:`chillfl.analysis.cache_ratio.soft_label_names`) are told apart by one rule, and the latter must not import
the replay's torch-heavy module to get it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from chillfl.errors import one_line


def unique_label(path: Path, others: Iterable[Path]) -> str:
    """The shortest tail of ``path`` (its name, then ``parent/name``, ...) that no path of ``others`` ends with, as printed;
    the whole path where none is shorter. Names are compared as printed (control characters escaped: ESC sequences drove
    the terminal), so that "a<ESC>" and a folder literally named "a\\x1b" are told apart by their parents rather than
    merged under one label. Paths printed alike in full (only such an escape tells them apart) get ``[1]``, ``[2]``...
    in the order of their resolved paths: still one label each."""
    def tail(p: Path, k: int) -> str:
        return one_line(str(p) if k >= len(p.parts) else "/".join(p.parts[-k:]))

    others = [o for o in others if o != path]
    for k in range(1, len(path.parts) + 1):
        label = tail(path, k)
        if not any(tail(o, k) == label for o in others):
            return label
    alike = sorted([path, *(o for o in others if tail(o, len(o.parts)) == label)], key=str)
    return f"{label}[{alike.index(path) + 1}]"

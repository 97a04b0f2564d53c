"""How a round's record is spelled in ``metrics.jsonl``: strict JSON, with non-finite values named beside their ``null``.

The files are strict JSON, so a NaN or infinite float is written as ``null``.
In memory ``None`` means "not measured" and NaN "measured, and it overflowed"
(only evaluation makes one: a global loss whose logits overflow), and a run
read back must tell them apart, or
:func:`~chillfl.storage.results.summarize` reports an earlier round's finite
loss as the final one. So a line with a non-finite top-level value also
carries :data:`NONFINITE`: ``"nonfinite": {"global_loss": "nan"}`` (``"inf"``,
``"-inf"``), which :func:`decode_record` turns back into the float. A line
without it (every line of an older file) reads as before. Values nested deeper
(a per-client table) stay ``null``.

Every reader of ``metrics.jsonl`` goes through :func:`decode_record` (the run
folder's resume, :func:`~chillfl.storage.results.read_metrics`, the
``python -m chillfl.metrics.*`` tables, the PA3Fed curves). This module imports
no torch, so that those small tables need none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

NONFINITE = "nonfinite"
"""The ``metrics.jsonl`` key naming a record's non-finite top-level values (written ``null``): key -> ``"nan"``, ``"inf"`` or ``"-inf"``."""
_SPELLING = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def strict(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None: result files are strict JSON (no NaN literals)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return value


def _spelled(value: float) -> str:
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


def encode_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as a ``metrics.jsonl`` line holds it: :func:`strict`, plus :data:`NONFINITE` naming the top-level values
    that were NaN or infinite (no such key when there were none, so a finite record's line is as it always was)."""
    if NONFINITE in record:
        raise ValueError(f"a round record may not have a key named {NONFINITE!r}: metrics.jsonl uses it for non-finite values")
    out = strict(dict(record))
    nonfinite = {k: _spelled(v) for k, v in record.items() if isinstance(v, float) and not math.isfinite(v)}
    if nonfinite:
        out[NONFINITE] = nonfinite
    return out


def decode_record(record: dict[str, Any]) -> dict[str, Any]:
    """A ``metrics.jsonl`` line's record as it was in memory: :data:`NONFINITE`'s values back in place of their ``null``
    (and the key removed). ValueError for a marker that names no ``null`` value or spells no non-finite float."""
    marks = record.pop(NONFINITE, None)
    if marks is None:
        return record
    if not isinstance(marks, dict) or not all(isinstance(v, str) and v in _SPELLING and k in record and record[k] is None for k, v in marks.items()):
        raise ValueError(f"{NONFINITE!r} must map keys whose value is null to one of {', '.join(map(repr, _SPELLING))}, got {marks!r}")
    record.update({k: _SPELLING[v] for k, v in marks.items()})
    return record

"""How a round's record is spelled in ``metrics.jsonl``: strict JSON, with non-finite values named beside their ``null``.

The files are strict JSON, so a NaN or infinite float is written as ``null``.
In memory ``None`` means "not measured" and NaN "measured, and it overflowed"
(only evaluation makes one: a global loss whose logits overflow), and a run
read back must tell them apart, or
:func:`~chillfl.storage.results.summarize` reports an earlier round's finite
loss as the final one. So a line with a non-finite value also carries
:data:`NONFINITE`, shaped as the record is: ``"nonfinite": {"global_loss": "nan"}``
(``"inf"``, ``"-inf"``) for a value of the record's own, and for one nested in
a table (a client's loss) or a list, the table's key with a map of its own,
by the table's keys or the list's positions:
``"nonfinite": {"client_train_loss": {"3": "inf"}}``. :func:`decode_record`
turns each back into the float. A line without the key (every line of an
older file) reads as before, and so does the top-level marker of a file
written before tables were marked (a table's ``null`` there stays ``null``).

Why tables too: their ``null`` read back as None, not as the NaN or inf the
run had in memory, so a resumed run's records (its first rounds read back
from disk) differed from the uninterrupted run's.

Every reader of ``metrics.jsonl`` goes through :func:`decode_record` (the run
folder's resume, :func:`~chillfl.storage.results.read_metrics`, the
``python -m chillfl.metrics.*`` tables, the PA3Fed curves). This module imports
no torch, so that those small tables need none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Union

NONFINITE = "nonfinite"
"""The ``metrics.jsonl`` key naming a record's non-finite values (written ``null``): key -> ``"nan"``, ``"inf"`` or
``"-inf"``, or, for a table or list holding some, key -> the same map of its keys or positions."""
_SPELLING = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}

Marks = dict[Any, Union[str, "Marks"]]
"""A :data:`NONFINITE` map: a key (a record's, a table's, or a list's position) -> a spelling, or the marks within."""


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


def _marks(value: Any) -> str | Marks | None:
    """What :data:`NONFINITE` says of ``value``: its spelling when it is a non-finite float, the marks of its items (by
    key or position) when it is a table or list holding some, else None (what :func:`strict` leaves as it was)."""
    if isinstance(value, float):
        return None if math.isfinite(value) else _spelled(value)
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    marks = {k: mark for k, v in items if (mark := _marks(v)) is not None}
    return marks or None


def encode_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as a ``metrics.jsonl`` line holds it: :func:`strict`, plus :data:`NONFINITE` naming the values, at any
    depth, that were NaN or infinite (no such key when there were none, so a finite record's line is as it always was)."""
    if NONFINITE in record:
        raise ValueError(f"a round record may not have a key named {NONFINITE!r}: metrics.jsonl uses it for non-finite values")
    out = strict(dict(record))
    nonfinite = _marks(dict(record))
    if nonfinite:
        out[NONFINITE] = nonfinite
    return out


def _position(container: dict[Any, Any] | list[Any], key: Any) -> Any:
    """The key of ``container`` that a mark's ``key`` names: itself in a table; in a list, the position, an int in memory
    or its decimal text once read back from JSON (whose keys are strings). ValueError (KeyError) when it names none."""
    if isinstance(container, dict):
        if key not in container:
            raise KeyError(key)
        return key
    at = key if type(key) is int else int(key) if isinstance(key, str) and key.isdigit() and str(int(key)) == key else -1
    if not 0 <= at < len(container):
        raise KeyError(key)
    return at


def _restorations(marks: Any, container: dict[Any, Any] | list[Any], out: list[tuple[Any, Any, float]]) -> None:
    """Each ``(container, key, float)`` that ``marks`` puts back in place of a ``null`` in ``container``, into ``out``;
    ValueError (or KeyError) for a mark that names no ``null``, no table or list, or spells no non-finite float."""
    if not isinstance(marks, dict):
        raise ValueError(marks)
    for key, mark in marks.items():
        at = _position(container, key)
        value = container[at]
        if isinstance(mark, str) and mark in _SPELLING and value is None:
            out.append((container, at, _SPELLING[mark]))
        elif isinstance(mark, dict) and isinstance(value, (dict, list)):
            _restorations(mark, value, out)
        else:
            raise ValueError(mark)


def decode_record(record: dict[str, Any]) -> dict[str, Any]:
    """A ``metrics.jsonl`` line's record as it was in memory: :data:`NONFINITE`'s values back in place of their ``null``,
    in the record and in its tables and lists (and the key removed). ValueError for a marker that names no ``null``
    value or spells no non-finite float; nothing is put back then."""
    marks = record.pop(NONFINITE, None)
    if marks is None:
        return record
    restored: list[tuple[Any, Any, float]] = []
    try:
        _restorations(marks, record, restored)
    except (ValueError, KeyError):
        raise ValueError(f"{NONFINITE!r} must map keys whose value is null to one of {', '.join(map(repr, _SPELLING))} "
                         f"(a table's or list's key to such a map of its own), got {marks!r}") from None
    for container, key, value in restored:
        container[key] = value
    return record

"""Communication totals and the cost to reach a target accuracy (SCARLET Sec. IV-A).

Every round record of both protocols carries ``bytes_cumulative`` (and
``bytes_up`` / ``bytes_down``); these functions read only the records. The
cost to reach a target is the cumulative bytes *through* the first round whose
accuracy is >= target (that round's bytes included; :func:`bytes_to_reach`). Kept apart
from the plots so that computing a run's summary never imports matplotlib.

Units: bytes (8 bits) throughout, as :mod:`chillfl.engine.ledger` counts them
(tensors at their dtype's size, quantised payloads in bits rounded up to
whole bytes per message, a method's scalars 8 bytes each); the compare table's "cumulative MB" is bytes /
10^6 (SI megabytes, not MiB).

Checked against papers/scarlet.txt Sec. IV-A, "Evaluation Metrics" (the
cumulative cost: all data exchanged between the server and clients, summed
over clients and rounds, the one-time public-set download excluded; the cost
to reach a target accuracy), 2026-12-02.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def accuracy_vs_bytes(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(cumulative bytes, accuracy) for the rounds where ``key`` was measured.

    A skipped round (nobody reported) sends nothing and its record carries no bytes: it sits at the total so far, so a
    skipped last round's evaluation of the final model (:meth:`~chillfl.protocols.book.ServerBook.last`) is not lost.
    Records before the first one with bytes are left out (a run that counts no bytes has no points)."""
    pts: list[tuple[int, float]] = []
    sent: int | None = None
    for r in records:
        if "bytes_cumulative" in r:
            sent = int(r["bytes_cumulative"])
        if sent is not None and r.get(key) is not None:
            pts.append((sent, float(r[key])))
    return [p[0] for p in pts], [p[1] for p in pts]


def bytes_to_reach(records: Sequence[Mapping[str, Any]], key: str, target: float) -> int | None:
    """Cumulative bytes through the first round whose ``key`` is >= target; None if never reached. The first *measured*
    round: under ``eval.every`` = k the target may have been reached up to k - 1 rounds (and their bytes) earlier
    (:func:`chillfl.storage.results.evaluation_interval`, which ``summary.json`` records as ``target_eval_interval``)."""
    for nbytes, acc in zip(*accuracy_vs_bytes(records, key)):
        if acc >= target:
            return nbytes
    return None


def communication_summary(records: Sequence[Mapping[str, Any]], target: float | None = None) -> dict[str, Any]:
    """Total bytes (up, down, both) and, with a target, the cost to reach it server- and client-side."""
    rows = [r for r in records if "bytes_cumulative" in r]
    out: dict[str, Any] = {
        "bytes_total": int(rows[-1]["bytes_cumulative"]) if rows else 0,
        "bytes_up_total": sum(int(r.get("bytes_up", 0)) for r in rows),
        "bytes_down_total": sum(int(r.get("bytes_down", 0)) for r in rows),
    }
    if target is not None:
        out["bytes_to_target"] = bytes_to_reach(records, "global_acc", target)
        out["local_bytes_to_target"] = bytes_to_reach(records, "local_acc", target)
    return out

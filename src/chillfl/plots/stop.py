"""The evaluation a stopped run's summary holds for its stop round, as a point beside its curves (no matplotlib here:
the HTML report reads it too).

A run a hook stops at a round ``eval.every`` skips has its stopped model evaluated into ``summary.json``
(:func:`chillfl.runner.stop_evaluated`), not into ``metrics.jsonl``: resumed, the run's records must be the uninterrupted
run's. Curves drawn from ``metrics.jsonl`` alone ended at an earlier evaluated round, without the final accuracy the
summary reports. The figures draw that point apart (a marker of its own, its own legend entry), never as a measured
round of the line, which it is not in the records a resume goes on from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from chillfl.numeric import is_real, is_whole

STOP_EVALUATION = "stop_evaluation"
"""``summary.json``'s key holding what a stopped run measured at its stop round for its summary alone (metric name ->
value; the round is ``stopped.round``); in the records a finishing run's figures are drawn from (never in
``metrics.jsonl``), the key of the last record that holds the same mapping."""

STOP_MARKER = "*"
"""The stop-round point's marker: a star, unlike the dots of the evaluated rounds (:func:`~chillfl.plots.figure.gap_marker`)."""


def stop_label(round: int | None, what: str = "") -> str:
    """The legend entry of a stop-round point: what it is and that it is the summary's alone, not a round of
    ``metrics.jsonl`` (``what``: the curve's name, where a panel has several; ``round`` None: points of several runs)."""
    head = f"{what}: " if what else ""
    at = "" if round is None else f", round {round}"
    return f"{head}stop-round evaluation{at} (summary.json only)"


@dataclass(frozen=True)
class StopPoint:
    """A stopped run's metric measured at its stop round (``round``), for its summary only."""

    round: int
    value: float


def _point(round: Any, evaluation: Any, key: str) -> StopPoint | None:
    if not is_whole(round) or not isinstance(evaluation, Mapping):
        return None
    value = evaluation.get(key)
    if not is_real(value) or not math.isfinite(value):  # None (not measured) or a non-finite value: nothing to draw
        return None
    return StopPoint(round, float(value))


def stop_point(records: Sequence[Mapping[str, Any]], key: str) -> StopPoint | None:
    """``key`` of the stop-round evaluation the last of ``records`` carries under :data:`STOP_EVALUATION` (a finishing
    run's figures); None where it carries none, or no finite ``key``."""
    if not records:
        return None
    return _point(records[-1].get("round"), records[-1].get(STOP_EVALUATION), key)


def summary_stop_point(summary: Mapping[str, Any], key: str) -> StopPoint | None:
    """``key`` of the stop-round evaluation a run folder's ``summary.json`` holds (``stopped.round``, :data:`STOP_EVALUATION`);
    None for a run that was not stopped, was evaluated at its stop round anyway, or a summary without it (before 2026-12-07)."""
    stopped = summary.get("stopped")
    return _point(stopped.get("round") if isinstance(stopped, Mapping) else None, summary.get(STOP_EVALUATION), key)


def with_stop_evaluation(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """``records`` with the stop-round evaluation of their run's ``summary`` (:data:`STOP_EVALUATION`) in a copy of the
    last record, as a finishing run gives its own figures (:func:`chillfl.runner._plots`): a comparison draws its runs
    from ``metrics.jsonl`` and ``summary.json``, and its curves ended at a stopped run's earlier evaluated round unsaid.
    ``records`` as they are where the summary holds none."""
    evaluated = summary.get(STOP_EVALUATION) if summary.get("stopped") else None
    if not records or not isinstance(evaluated, Mapping) or not evaluated:
        return records
    return [*records[:-1], {**records[-1], STOP_EVALUATION: dict(evaluated)}]

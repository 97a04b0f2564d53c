"""The spread over seeds that every curve band draws: one function and one name for it.

A comparison's ``curves.png`` (``compare --seeds``) and the HTML report's curves both shade the
mean over seeds +- one sample standard deviation, the same spread as the tables' "mean ± std"
column; :data:`SPREAD` names it in their legends and captions, so a reader never has to guess
whether a band is a min-max, a std or an interval.

Checked against :mod:`chillfl.metrics.stats` (the tables' ``mean ± std``:
the same sample std, ddof 1) and papers/flexchill.txt Figs. 7-8 ("the shaded
areas indicate the standard deviation across different runs"), 2026-12-02.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

SPREAD = "band = ± 1 std over seeds"
"""The band's name, as legends and captions print it (the std is the sample std, ddof 1: the tables' ``mean ± std``)."""


def measured(records: Sequence[Mapping[str, Any]], key: str) -> dict[int, float]:
    """``key`` per round of one run; for a ``global_*`` key, a skipped round without it takes the round before's value
    (the model did not change). Local accuracies are not carried: a skipped round has no clients to measure."""
    out: dict[int, float] = {}
    for r in records:
        rnd = int(r["round"])
        if r.get(key) is not None:
            out[rnd] = float(r[key])
        elif r.get("skipped") and key.startswith("global_") and rnd - 1 in out:  # eval.every > 1: the round before may have none
            out[rnd] = out[rnd - 1]
    return out


def seed_band(runs: Sequence[Sequence[Mapping[str, Any]]], key: str) -> tuple[list[int], list[float], list[float]]:
    """(rounds, mean, std) of ``key`` over the runs (one per seed), at the rounds every run measured.

    ``std`` is the sample std (ddof 1), 0 for one run: a band is drawn from ``mean - std`` to ``mean + std``.
    A skipped round of a run (Poisson sampling drew nobody, too few reported) leaves its global model as the
    round before it left it, so a ``global_*`` value measured in that round before holds in it too
    (:func:`measured`): otherwise each seed's skipped rounds, different per seed, would thin every seed's curve."""
    per_run = [measured(records, key) for records in runs]
    rounds = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
    means, stds = [], []
    n = len(per_run)
    for rnd in rounds:
        values = [p[rnd] for p in per_run]
        mean = sum(values) / n
        means.append(mean)
        stds.append(math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0)
    return rounds, means, stds

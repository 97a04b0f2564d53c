"""The spread over seeds that every curve band draws: one function and one name for it.

A comparison's ``curves.png`` (``compare --seeds``) and the HTML report's curves both shade the
mean over seeds +- one sample standard deviation, the same spread as the tables' "mean ± std"
column; :data:`SPREAD` names it in their legends and captions, so a reader never has to guess
whether a band is a min-max, a std or an interval.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

SPREAD = "band = ± 1 std over seeds"
"""The band's name, as legends and captions print it (the std is the sample std, ddof 1: the tables' ``mean ± std``)."""


def seed_band(runs: Sequence[Sequence[Mapping[str, Any]]], key: str) -> tuple[list[int], list[float], list[float]]:
    """(rounds, mean, std) of ``key`` over the runs (one per seed), at the rounds every run measured.

    ``std`` is the sample std (ddof 1), 0 for one run: a band is drawn from ``mean - std`` to ``mean + std``."""
    per_run = [{int(r["round"]): float(r[key]) for r in records if r.get(key) is not None} for records in runs]
    rounds = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
    means, stds = [], []
    n = len(per_run)
    for rnd in rounds:
        values = [p[rnd] for p in per_run]
        mean = sum(values) / n
        means.append(mean)
        stds.append(math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0)
    return rounds, means, stds

"""Correlation of client characteristics with their best temperature (FedChill, App. A.5).

A.5 asks which client characteristic (heterogeneity score, Gini coefficient,
dominant-class probability, active classes, dataset size, entropy, KL) best
predicts each client's optimal temperature, and reports Pearson's r with its
two-sided p-value (e.g. heterogeneity score r = -0.389, p = 0.267 over 10
clients). :func:`correlation_table` produces those rows; the per-client
measures come from :func:`chillfl.temperature.heterogeneity.heterogeneity`
(raw values, ``normalisation="none"``, or the [0, 1] versions).

Choices
-------
* A constant predictor (or constant temperatures) has no defined r: the row
  gets r = p = NaN instead of scipy's warning, and ``undefined`` says which
  (every client's best T the same happens with a short grid); the printed
  table says it under the rows. So does a NaN or infinite value (scipy gave
  nan with a RuntimeWarning and no word on why).
* Rows keep the order of ``measures`` (deterministic; sort for display if needed).

Checked against papers/fedchill.txt App. A.5 (Pearson r and its p-value per
client characteristic, n = 10 clients) and ``scipy.stats.pearsonr`` (default
``alternative="two-sided"``, the exact p from the Beta(n/2 - 1, n/2 - 1)
distribution of r), 2026-12-02.
"""

from __future__ import annotations

import math
from typing import Mapping, TypedDict

import numpy as np

from chillfl.extras import need


class _Correlation(TypedDict):
    measure: str
    r: float
    p: float
    n: int


class CorrelationRow(_Correlation, total=False):
    """One measure's correlation, as ``correlation.json`` writes it: Pearson ``r``, its two-sided ``p``, over ``n`` clients;
    ``undefined`` (present only when r is NaN) says why there is no r."""

    undefined: str


def undefined_row(measure: str, n: int, why: str) -> CorrelationRow:
    """The row of a measure with no r: NaN r and p, and why."""
    return {"measure": measure, "r": math.nan, "p": math.nan, "n": n, "undefined": why}


def correlation_table(measures: Mapping[str, np.ndarray], best_temperature: np.ndarray) -> list[CorrelationRow]:
    """One row per measure (Pearson r, two-sided p-value; :class:`CorrelationRow`)."""
    t = np.asarray(best_temperature, dtype=np.float64)
    if t.ndim != 1 or t.size < 2:
        raise ValueError(f"best_temperature must be a vector of at least 2 clients, got shape {t.shape}")
    rows: list[CorrelationRow] = []
    for name, values in measures.items():
        x = np.asarray(values, dtype=np.float64)
        if x.shape != t.shape:
            raise ValueError(f"measure {name!r} has shape {x.shape}, best_temperature has {t.shape}")
        n = int(t.size)
        if not np.isfinite(t).all():
            rows.append(undefined_row(name, n, "a client's value is not finite (nan or inf)"))
        elif not np.isfinite(x).all():
            rows.append(undefined_row(name, n, f"{name} is not finite (nan or inf) for some client"))
        elif np.ptp(t) == 0:
            rows.append(undefined_row(name, n, f"every client's value is {t[0]:g}: nothing to correlate with"))
        elif np.ptp(x) == 0:
            rows.append(undefined_row(name, n, f"{name} is {x[0]:g} for every client"))
        else:
            result = need("scipy.stats", "analysis", "correlations").pearsonr(x, t)
            rows.append({"measure": name, "r": float(result.statistic), "p": float(result.pvalue), "n": n})
    return rows


def undefined_notes(rows: list[CorrelationRow]) -> list[str]:
    """Why some rows have no r (``nan``), each reason once, in row order."""
    return list(dict.fromkeys(row["undefined"] for row in rows if "undefined" in row))


def format_table(rows: list[CorrelationRow]) -> str:
    """Plain-text table: measure, r, p, n (r and p to 3 decimals), then why any r is nan."""
    width = max([len("measure")] + [len(str(row["measure"])) for row in rows])
    lines = [f"{'measure':<{width}}  {'r':>7}  {'p':>6}  {'n':>4}"]
    for row in rows:
        lines.append(f"{row['measure']:<{width}}  {row['r']:>7.3f}  {row['p']:>6.3f}  {row['n']:>4d}")
    lines += [f"nan: no r, {why}" for why in undefined_notes(rows)]
    return "\n".join(lines)

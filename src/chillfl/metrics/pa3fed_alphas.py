"""How far PA3Fed's reweighting departs from its base, read from metrics.jsonl (issue 15 study).

Per run, from PA3Fed's round records (``agg_clp``, ``agg_adapted``,
``agg_alphas``, ``agg_weight_shift``):

* ``clp_fraction``: share of rounds the Eq. 6 check put in a critical
  learning period; ``adapted_fraction``: share aggregated with m_i alpha_i.
* alpha quantiles (min, median, max) over every (round, client) pair of
  a *returning* client (a first participation has alpha = 1 by definition,
  so counting it would only pull the distribution towards 1);
  ``first_share``: the share of pairs that were first participations.
* ``shift_adapted``: mean over adapted rounds of the total-variation distance
  0.5 sum_i |m_i alpha_i / sum_j m_j alpha_j - m_i| between the weights used
  and the base's weights (0: FedAvg's weights exactly); NaN, printed ``-``,
  for a run with no adapted round (``mode = "never"``, or no CLP): it has no
  such mean, and 0 would read as "adapted without moving the weights".
  ``shift_max``: its largest value over all rounds, adapted or not (the
  shift PA3Fed would have made where it was not used), so the column says so.

``python -m chillfl.metrics.pa3fed_alphas FOLDER...`` prints one Markdown row
per folder (run or compare folder): the field-wise mean over the PA3Fed
runs found under it (e.g. its seeds; not those in ``NAME.failed`` or
``NAME.partial`` folders, which a compare table leaves out of its statistics
too), each field over the runs that have it (a run without adapted rounds
is left out of the shift's mean); ``--runs`` adds one row per run. A
folder that is missing or holds no PA3Fed run, or a garbled metrics.jsonl,
is one line on stderr and exit status 2 (:mod:`chillfl.metrics.records`).

Checked against papers/pa3fed.txt Eq. 10 and Algorithm 1 line 20 (alpha_i, the adapted weights
m_i alpha_i / sum_j m_j alpha_j) and the records
:mod:`chillfl.aggregation.pa3fed` writes, 2026-12-02; a study summary of
chillfl's own, not a measure the paper defines.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.errors import ConfigError
from chillfl.metrics.records import METRICS, read_records, run_tool, unfinished


@dataclass(frozen=True)
class AlphaSummary:
    rounds: int
    clp_fraction: float
    adapted_fraction: float
    alpha_min: float
    alpha_median: float
    alpha_max: float
    first_share: float
    shift_adapted: float
    shift_max: float


def alpha_summary(records: Sequence[Mapping[str, Any]]) -> AlphaSummary:
    """Summary of one PA3Fed run's round records (see the module docstring)."""
    pa3 = [r for r in records if "agg_alphas" in r]
    if not pa3:
        raise ValueError("no PA3Fed records (agg_alphas) in this run")
    seen: set[str] = set()
    returning: list[float] = []
    first = 0
    for r in pa3:
        for cid, alpha in r["agg_alphas"].items():
            if str(cid) in seen:
                returning.append(float(alpha))
            else:
                first += 1
                seen.add(str(cid))
    shifts = [float(r["agg_weight_shift"]) for r in pa3 if r.get("agg_weight_shift") is not None]
    adapted_shifts = [float(r["agg_weight_shift"]) for r in pa3 if r.get("agg_adapted") and r.get("agg_weight_shift") is not None]
    nan = float("nan")
    return AlphaSummary(
        rounds=len(pa3),
        clp_fraction=sum(bool(r.get("agg_clp")) for r in pa3) / len(pa3),
        adapted_fraction=sum(bool(r.get("agg_adapted")) for r in pa3) / len(pa3),
        alpha_min=min(returning) if returning else nan,
        alpha_median=statistics.median(returning) if returning else nan,
        alpha_max=max(returning) if returning else nan,
        first_share=first / (first + len(returning)) if first + len(returning) else nan,  # no client in any record: no share
        shift_adapted=statistics.fmean(adapted_shifts) if adapted_shifts else nan,
        shift_max=max(shifts) if shifts else nan,
    )


HEADER = (
    "| run | rounds | CLP rounds % | adapted % | alpha min / median / max (returning clients) | first participations % "
    "| weight shift (TV), mean over adapted rounds | max over all rounds |\n|---|---|---|---|---|---|---|---|"
)


def _num(value: float, spec: str) -> str:
    """``value`` formatted, or ``-`` where it is NaN (the run has none: no adapted round, no returning client)."""
    return "-" if math.isnan(value) else format(value, spec)


def row(label: str, s: AlphaSummary) -> str:
    return (
        f"| {label} | {s.rounds} | {100 * s.clp_fraction:.0f} | {100 * s.adapted_fraction:.0f} "
        f"| {_num(s.alpha_min, '.3f')} / {_num(s.alpha_median, '.3f')} / {_num(s.alpha_max, '.3f')} | {_num(100 * s.first_share, '.0f')} "
        f"| {_num(s.shift_adapted, '.4f')} | {_num(s.shift_max, '.4f')} |"
    )


def mean_summary(summaries: Sequence[AlphaSummary]) -> AlphaSummary:
    """Field-wise mean over runs (e.g. seeds): the mean minimum alpha, mean median, ...; each field over the runs
    that have it (not NaN), so a run without adapted rounds does not pull the mean shift towards 0 (NaN if none has it)."""
    if not summaries:
        raise ValueError("no runs to average")
    rounds, *rest = (_mean_of_present([float(v) for v in column]) for column in zip(*map(dataclasses.astuple, summaries)))
    return AlphaSummary(round(rounds), *rest)


def _mean_of_present(values: Sequence[float]) -> float:
    """Mean of the values that are not NaN; NaN when every one is."""
    present = [v for v in values if not math.isnan(v)]
    return statistics.fmean(present) if present else float("nan")


def folder_rows(folder: Path, runs: bool) -> list[str]:
    """The rows of one FOLDER: with ``runs`` one per PA3Fed run under it, then their mean; a ConfigError when it has none."""
    if not folder.is_dir():
        raise ConfigError(str(folder), "is not a folder (give run folders or compare folders)")
    found: list[AlphaSummary] = []
    rows = []
    for path in sorted(p for p in folder.glob(f"**/{METRICS}") if not unfinished(p, folder)):
        records = read_records(path)
        if any("agg_alphas" in r for r in records):
            try:
                found.append(alpha_summary(records))
            except (TypeError, ValueError, AttributeError) as exc:
                raise ConfigError(str(path), f"its PA3Fed records (agg_alphas, agg_weight_shift) are malformed: {exc}") from None
            if runs:
                rows.append(row(f"{folder} / {path.parent.name}", found[-1]))
    if not found:
        raise ConfigError(str(folder), f"holds no PA3Fed run (no {METRICS} with agg_alphas under it)")
    return [*rows, row(f"{folder} (mean of {len(found)} runs)", mean_summary(found))]


def main(argv: Sequence[str] | None = None) -> int:
    """Tabulate PA3Fed's CLP share, alpha distribution and weight shift: one row per FOLDER (mean over its PA3Fed runs)."""
    import argparse

    prog = "python -m chillfl.metrics.pa3fed_alphas"
    parser = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--runs", action="store_true", help="also one row per run")
    args = parser.parse_args(argv)
    return run_tool(prog, lambda: [HEADER, *(line for folder in args.folders for line in folder_rows(folder, args.runs))])


if __name__ == "__main__":
    raise SystemExit(main())

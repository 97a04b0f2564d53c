"""Stability measures of a loss trajectory (PA3Fed, Table 1 and Fig. 5).

For a curve ``L_1..L_n`` (one value per round the client trained, or per
round of the global model):

* standard deviation:     sqrt(mean((L_t - mean L)^2))
* moving-average std:     mean over every window of ``window`` consecutive
                          values of that window's standard deviation
                          (local volatility, with the trend removed)
* mean absolute deviation: mean(|L_t - mean L|)
* range:                   max L - min L
* maximum change rate:     max_t |L_t - L_{t-1}|  (per round)

Fig. 5 compares the loss standard deviation inside and outside the CLP:
:func:`inside_vs_outside_std` splits one trajectory by round flags, and
:func:`mean_inside_vs_outside_std` averages that over clients.

Choices
-------
* Population standard deviation (``ddof = 0``); ``ddof=1`` is available.
* The paper does not state the moving-average window; default 5 rounds.
  With fewer values than ``window`` the moving std is NaN. "Moving-average
  standard deviation" is read as the mean of the windows' stds, not the std
  of the moving-average curve: Table 1's values (std 0.089, moving std 0.019
  for FedAvg) fit the first, while a smoothed curve's std would stay close
  to the std itself.
* "Change rate" is read as the absolute change per round; ``relative=True``
  gives ``max_t |L_t - L_{t-1}| / |L_{t-1}|`` instead.
* Whose loss: the paper records "the loss trajectories of all 50 clients"
  without naming the loss. :func:`stability_summary` uses by default each
  client's mean local training loss of every round it trained
  (``client_train_loss`` in metrics.jsonl, recorded by every protocol, so a
  baseline and its PA3Fed version are measured alike); ``source =
  "agg_scores"`` uses PA3Fed's score s_i (Eq. 8: the trained local model's
  cross-entropy on its own data at T = 1), recorded by PA3Fed runs only. A run
  without the source (or with no finite value of it) is said in one line that
  names the run and the key, not shown as a table row of ``-``.
* Table 1's means over clients and Fig. 5's take the clients with at least
  2 values (``MIN_VALUES``): a client that trained once has std = MAD =
  range = 0 and no change rate, so averaging each measure over the clients
  where it is defined made thin participation look stable in three columns
  and not the other two. ``table1_clients`` says how many clients each
  measure rests on.
* A trajectory has one value per participation (about rounds x 20% values
  per client in the paper's setting), not one per round.

Checked against papers/pa3fed.txt Table 1 (the five measures, named only,
citing Bashan et al. 2008 and Buckley and Voorhees 2017) and Fig. 5 (loss std
inside the CLP vs the rest periods), 2026-12-02; the paper gives no formulas
and no authors' code was found, so each reading above is a documented choice.
``python -m chillfl.metrics.stability``: a missing folder, a folder without
runs, a garbled metrics.jsonl or ``--window`` < 1 is one line and exit 2; a
compare folder's ``NAME.failed`` / ``NAME.partial`` runs are left out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from chillfl.errors import ConfigError
from chillfl.metrics.records import METRICS, client_order, read_records, run_folders, run_tool

MOVING_WINDOW = 5
MIN_VALUES = 2
"""Values a client's trajectory needs to count in Table 1's and Fig. 5's means: one value's spread is 0 by definition."""


def _array(losses: Sequence[float]) -> np.ndarray:
    arr = np.asarray(losses, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("a loss trajectory is one-dimensional")
    return arr


def standard_deviation(losses: Sequence[float], ddof: int = 0) -> float:
    arr = _array(losses)
    return float(arr.std(ddof=ddof)) if arr.size > ddof else math.nan


def moving_std(losses: Sequence[float], window: int = MOVING_WINDOW, ddof: int = 0) -> float:
    """Mean of the standard deviations of all length-``window`` sliding windows."""
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    arr = _array(losses)
    if arr.size < window or window <= ddof:
        return math.nan
    windows = np.lib.stride_tricks.sliding_window_view(arr, window)
    return float(windows.std(axis=1, ddof=ddof).mean())


def mean_absolute_deviation(losses: Sequence[float]) -> float:
    arr = _array(losses)
    return float(np.abs(arr - arr.mean()).mean()) if arr.size else math.nan


def value_range(losses: Sequence[float]) -> float:
    arr = _array(losses)
    return float(arr.max() - arr.min()) if arr.size else math.nan


def max_change_rate(losses: Sequence[float], relative: bool = False) -> float:
    """max_t |L_t - L_{t-1}| (or divided by |L_{t-1}| when ``relative``)."""
    arr = _array(losses)
    if arr.size < 2:
        return math.nan
    change = np.abs(np.diff(arr))
    if relative:
        change = change / np.abs(arr[:-1])
    return float(change.max())


def stability_measures(
    losses: Sequence[float], *, window: int = MOVING_WINDOW, ddof: int = 0, relative_change: bool = False
) -> dict[str, float]:
    """All five measures of Table 1 for one trajectory."""
    return {
        "std": standard_deviation(losses, ddof),
        "moving_std": moving_std(losses, window, ddof),
        "mad": mean_absolute_deviation(losses),
        "range": value_range(losses),
        "max_change_rate": max_change_rate(losses, relative_change),
    }


def inside_vs_outside_std(losses: Sequence[float], clp_flags: Sequence[bool], ddof: int = 0) -> tuple[float, float]:
    """(std of the losses at CLP rounds, std at the other rounds); NaN for an empty side (Fig. 5)."""
    arr = _array(losses)
    flags = np.asarray(clp_flags, dtype=bool)
    if flags.shape != arr.shape:
        raise ValueError(f"need one CLP flag per loss value, got {flags.size} flags for {arr.size} values")
    return standard_deviation(arr[flags], ddof), standard_deviation(arr[~flags], ddof)


def mean_inside_vs_outside_std(
    client_losses: Mapping[int | str, Mapping[int, float]], clp_by_round: Mapping[int, bool], ddof: int = 0, min_values: int = MIN_VALUES
) -> tuple[float, float]:
    """Fig. 5: average over clients of :func:`inside_vs_outside_std`.

    ``client_losses[cid][round]`` is the client's loss in a round it trained;
    a client with fewer than ``min_values`` values on a side is left out of
    that side's mean (the std of a single value, 0, says nothing about stability). Clients are taken in id order (:func:`~chillfl.metrics.records.client_order`),
    whatever the mapping's, so that the means do not depend on it (:func:`client_trajectories`).
    """
    inside, outside = [], []
    for rounds in (client_losses[cid] for cid in sorted(client_losses, key=client_order)):
        order = sorted(rounds)
        flags = [bool(clp_by_round[r]) for r in order]
        s_in, s_out = inside_vs_outside_std([rounds[r] for r in order], flags, ddof)
        if not math.isnan(s_in) and sum(flags) >= min_values:
            inside.append(s_in)
        if not math.isnan(s_out) and len(flags) - sum(flags) >= min_values:
            outside.append(s_out)
    return _mean_or_nan(inside), _mean_or_nan(outside)


def _mean_or_nan(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan


# ---------------------------------------------------------------- per-run summary (summary.json)

TRAJECTORY_SOURCES = ("client_train_loss", "agg_scores")
"""Per-round ``{client id: value}`` tables of metrics.jsonl a trajectory can be read from."""


def client_key(cid: object) -> int | str:
    """A table's client id as one key whether read from memory or from ``metrics.jsonl``: a whole number (``2``, ``"2"``)
    as the int, any other id (a plugin's ``"site-a"``) as the text ``metrics_clients.csv`` lists it under.

    Why: the ids were read with ``int()``, so a table keyed otherwise (a plugin aggregator's ``scores`` by site name,
    read with ``--source agg_scores``) stopped the tool as "malformed"; the whole-number test is
    :func:`~chillfl.metrics.records.client_order`'s, so a key sorts and merges the same way everywhere."""
    rank, number, text = client_order(cid)
    return number if rank == 0 else text


def client_trajectories(records: Sequence[Mapping[str, Any]], source: str = "client_train_loss") -> dict[int | str, dict[int, float]]:
    """``{client id: {round: value}}`` from each record's ``source`` table (rounds the client trained), clients in id
    order (:func:`~chillfl.metrics.records.client_order`, the order of ``metrics_clients.csv``) and each client's rounds in order.
    An id is kept as it is (:func:`client_key`): a whole number as the int, any other as its text.

    In that order whatever order the tables list their clients: a run's records in memory list them in id order
    (``2, 10``), read back from ``metrics.jsonl`` in its sorted-key text order (``"10", "2"``). The means over clients
    (:func:`stability_summary`) add the clients in this dict's order, and a float sum depends on it: taken in first-seen
    order, a resumed run (its first rounds read back from disk) wrote a summary.json whose ``stability`` differed in the
    last bits from the uninterrupted run's."""
    out: dict[int | str, dict[int, float]] = {}
    for record in records:
        table = record.get(source)
        if not isinstance(table, Mapping):
            continue
        for cid, value in table.items():
            if value is not None and math.isfinite(float(value)):
                out.setdefault(client_key(cid), {})[int(record["round"])] = float(value)
    return {cid: dict(sorted(out[cid].items())) for cid in sorted(out, key=client_order)}


def clp_flags(records: Sequence[Mapping[str, Any]]) -> dict[int, bool]:
    """``{round: inside CLP}`` from PA3Fed's ``agg_clp`` (empty when the run did not detect periods)."""
    return {int(r["round"]): bool(r["agg_clp"]) for r in records if r.get("agg_clp") is not None}


def stability_summary(
    records: Sequence[Mapping[str, Any]],
    *,
    source: str = "client_train_loss",
    window: int = MOVING_WINDOW,
    ddof: int = 0,
) -> dict[str, Any] | None:
    """Table 1 and Fig. 5 for one run; None when the records hold no per-client trajectory.

    ``table1``: each measure of :func:`stability_measures` over each client's
    trajectory, averaged over the clients with at least ``MIN_VALUES`` (2)
    values where it is defined (Table 1 shows one client; the mean over
    clients does not depend on picking one). Why: a client that trained once
    has std = MAD = range = 0 but no change rate, so counting it in some
    columns and not others made thin participation look stable (Fig. 5's
    rule, :func:`mean_inside_vs_outside_std`). ``table1_clients`` says how
    many clients each measure rests on (the moving std needs ``window``
    values); ``clients`` counts every client with a trajectory.
    With PA3Fed's CLP flags in the records (``agg_clp``) it adds the CLP
    rounds and Fig. 5's mean loss std inside / outside the CLP.
    NaN (undefined) values are written as None so summary.json stays strict JSON.
    """
    if source not in TRAJECTORY_SOURCES:
        raise ValueError(f"unknown trajectory source {source!r}; allowed: {', '.join(TRAJECTORY_SOURCES)}")
    trajectories = client_trajectories(records, source)
    if not trajectories:
        return None
    per_client = [stability_measures([v for _, v in sorted(t.items())], window=window, ddof=ddof)
                  for t in trajectories.values() if len(t) >= MIN_VALUES]
    keys = tuple(stability_measures([0.0, 0.0]))
    kept = {key: [m[key] for m in per_client if not math.isnan(m[key])] for key in keys}
    out: dict[str, Any] = {
        "source": source,
        "window": window,
        "clients": len(trajectories),
        "table1": {key: _mean_or_nan(values) for key, values in kept.items()},
        "table1_clients": {key: len(values) for key, values in kept.items()},
    }
    flags = clp_flags(records)
    if flags:
        out["clp_rounds"] = sorted(r for r, inside in flags.items() if inside)
        covered = {cid: {r: v for r, v in t.items() if r in flags} for cid, t in trajectories.items()}
        out["loss_std_inside_clp"], out["loss_std_outside_clp"] = mean_inside_vs_outside_std(covered, flags, ddof)
    return _json_safe(out)


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    return value


def format_stability_table(summaries: Mapping[str, Mapping[str, Any] | None]) -> str:
    """A markdown table (one row per run label) of Table 1's measures and Fig. 5's inside / outside CLP std.

    ``clients (moving_std)``: "k of n (m)": the std, MAD, range and max change rate are means over the k of the run's n
    clients with at least 2 values, the moving std over the m with at least ``window`` values."""
    keys = ("std", "moving_std", "mad", "range", "max_change_rate")
    header = ["run", *keys, "clients (moving_std)", "std in CLP", "std outside CLP", "CLP rounds"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]

    def num(x: Any) -> str:
        return "-" if x is None else f"{x:.3f}"

    for label, s in summaries.items():
        if not s:
            lines.append(f"| {label} |" + " - |" * (len(header) - 1))
            continue
        clp = s.get("clp_rounds")
        cells = [num(s["table1"].get(k)) for k in keys]
        rests = s.get("table1_clients") or {}
        cells.append(f"{rests.get('std', '-')} of {s['clients']} ({rests.get('moving_std', '-')})")
        cells += [num(s.get("loss_std_inside_clp")), num(s.get("loss_std_outside_clp")), "-" if clp is None else _ranges(clp)]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def no_trajectory(run: str, records: Sequence[Mapping[str, Any]], source: str) -> str:
    """The line that says why run ``run`` has no row: its records hold no ``source`` table, or no finite value in one.
    Why: a row of ``-`` read as "measured, and undefined", where nothing was there to measure (soft-label runs recorded
    no ``client_train_loss`` before every protocol did; any run without PA3Fed's ``agg_scores``)."""
    if any(isinstance(r.get(source), Mapping) and r[source] for r in records):
        return f"{run}: no finite {source} value in its {METRICS}: nothing to measure"
    return f"{run}: no {source} in its {METRICS}: nothing to measure"


def _ranges(rounds: Sequence[int]) -> str:
    """[2, 3, 4, 7] -> '2-4, 7' ('none' when empty)."""
    if not rounds:
        return "none"
    parts, start, prev = [], rounds[0], rounds[0]
    for r in list(rounds[1:]) + [None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        parts.append(f"{start}-{prev}" if prev > start else f"{start}")
        if r is not None:
            start = prev = r
    return ", ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m chillfl.metrics.stability FOLDER...``: the table for run folders or ``compare`` folders."""
    import argparse

    prog = "python -m chillfl.metrics.stability"
    parser = argparse.ArgumentParser(prog=prog, description=main.__doc__)
    parser.add_argument("folders", nargs="+", type=Path, help="run folders (with metrics.jsonl) or compare folders holding them")
    parser.add_argument("--source", default="client_train_loss", choices=TRAJECTORY_SOURCES)
    parser.add_argument("--window", type=int, default=MOVING_WINDOW)
    args = parser.parse_args(argv)

    def table() -> list[str]:
        if args.window < 1:
            raise ConfigError("--window", f"must be >= 1, got {args.window}")
        summaries, unmeasured = {}, []
        # a folder given twice (o1 and $PWD/o1 too): once, under the spelling given first
        given: dict[Path, Path] = {}
        for run in (run for folder in args.folders for run in run_folders(folder)):
            given.setdefault(run.resolve(), run)
        runs = list(given.values())
        names = [run.name for run in runs]
        for run in runs:
            # a name two runs share (FOLDER arguments each holding a run "pf") is told apart by its path, not merged into one row
            label = run.as_posix() if names.count(run.name) > 1 else run.name
            path = run / METRICS
            try:
                records = read_records(path)
                summary = stability_summary(records, source=args.source, window=args.window)
            except ConfigError:
                raise
            except (TypeError, ValueError, KeyError) as exc:
                raise ConfigError(str(path), f"its round records are malformed ({args.source}, round): {type(exc).__name__}: {exc}") from None
            if summary is None:
                unmeasured.append(no_trajectory(label, records, args.source))
            else:
                summaries[label] = summary
        return ([format_stability_table(summaries)] if summaries else []) + unmeasured

    return run_tool(prog, table)


if __name__ == "__main__":
    raise SystemExit(main())

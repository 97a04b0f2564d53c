"""PA3Fed plots: accuracy with the critical learning periods shaded, and the FGN curve (PA3Fed Figs. 3-4).

Both read only metrics.jsonl records: ``global_acc`` and PA3Fed's
``agg_fgn`` (Eq. 5) and ``agg_clp`` (Eq. 6 verdict of the round).
A CLP round ``t`` is shaded as the interval ``[t - 0.5, t + 0.5]``, so
consecutive CLP rounds merge into one band as in Fig. 3.

``python -m chillfl.plots.pa3fed FOLDER`` reads a run folder or a compare
folder as the ``python -m chillfl.metrics.*`` tables do
(:func:`chillfl.metrics.records.run_folders`: a ``NAME.failed`` /
``NAME.partial`` run is left out), draws the seeds of one variant as their
mean with a ± 1 std band (as the compare figures do), and refuses a folder with no PA3Fed run
(no ``agg_clp`` record): one line, exit status 2, nothing written.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.errors import MissingExtra
from chillfl.extras import need

PROG = "python -m chillfl.plots.pa3fed"
"""The command :func:`main` is (its usage line and error lines)."""

try:
    need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError
except MissingExtra as missing:
    if __name__ != "__main__":
        raise  # imported: the caller (a run's figures, `chillfl analyze`) says the line
    # Run as PROG: the line and exit 2, as run_tool says a ConfigError; it was a traceback, raised before main() ran.
    print(f"{PROG}: error: {missing}", file=sys.stderr)
    raise SystemExit(2) from None
from matplotlib.axes import Axes  # noqa: E402

from chillfl.config import safe_name  # noqa: E402
from chillfl.errors import ConfigError, json_loads  # noqa: E402
from chillfl.metrics.records import METRICS, read_records, run_folders, run_tool  # noqa: E402
from chillfl.metrics.spread import SPREAD, seed_band  # noqa: E402
from chillfl.run_names import CLP_FIGURE, comparison_labels  # noqa: E402
from chillfl.plots.registry import FigureSpec, register_figure  # noqa: E402
from chillfl.plots.figure import Figure, finish_figure, gap_marker, literal, lone_spread, log_scale, measured_series, nulls_as_nan, percent_axis, save_png, shared_legend, wrapped  # noqa: E402
from chillfl.plots.run import integer_rounds, no_finished_run  # noqa: E402
from chillfl.plots.styles import variant_style  # noqa: E402

CLP_COLOR = "#9ecae1"  # light blue, as in Fig. 3


def clp_spans(records: Sequence[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """(first, last) round of every run of consecutive CLP rounds, in order."""
    rounds = sorted(int(r["round"]) for r in records if r.get("agg_clp"))
    spans: list[tuple[int, int]] = []
    for rnd in rounds:
        if spans and rnd == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], rnd)
        else:
            spans.append((rnd, rnd))
    return spans


def shade_clp(ax: Axes, spans: Sequence[tuple[int, int]], label: str = "CLP") -> None:
    """Light-blue bands over the CLP rounds (one legend entry)."""
    for i, (first, last) in enumerate(spans):
        ax.axvspan(first - 0.5, last + 0.5, color=CLP_COLOR, alpha=0.5, lw=0, label=label if i == 0 else None)


def plot_clp(records: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> bool:
    """Global accuracy and FGN(t) over rounds, CLP rounds shaded; False (nothing written) without FGN values."""
    fgn_rounds, fgn = measured_series(records, "agg_fgn")  # a null breaks a line, as a NaN does
    if not fgn_rounds:
        return False
    spans = clp_spans(records)
    fig = Figure(figsize=(11, 4))
    ax_acc, ax_fgn = fig.subplots(1, 2)
    acc_rounds, acc = measured_series(records, "global_acc")
    shade_clp(ax_acc, spans)
    if acc_rounds:
        ax_acc.plot(acc_rounds, acc, marker=".", label="global model, test set")
    ax_acc.set(xlabel="round", ylabel="accuracy", title="Accuracy (CLP shaded)")
    shade_clp(ax_fgn, spans)
    ax_fgn.plot(fgn_rounds, fgn, marker=".", color="C1", label="FGN(t), as logged (agg_fgn)")  # Eq. 5 only under the default fgn_scale_by_lr and grad_norm
    percent_axis(ax_acc)
    logged = min((v for v in fgn if math.isfinite(v)), default=0.0) > 0
    if logged:  # labelled 0.05, 0.1, ...: matplotlib's 6x10^-2 and 10^-1 left most of a decade's values unlabelled
        log_scale(ax_fgn, "y")
    ax_fgn.set(xlabel="round", ylabel="FGN (log scale)" if logged else "FGN", title="Federated gradient norm")  # a dip reads deeper on a log axis
    for ax in (ax_acc, ax_fgn):
        integer_rounds(ax)
    finish_figure(fig, (ax_acc, ax_fgn), path, title)
    return True


def plot_compare_clp(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str = "") -> bool:
    """Fig. 4 style: every variant's accuracy curve; the CLP rounds of each PA3Fed variant as dots on its curve.

    A variant with no records had no finished run: it keeps its colour slot and a legend entry says so. Returns False
    (nothing written) when no variant has a global accuracy curve.
    """
    return plot_compare_clp_seeds({label: [records] if records else [] for label, records in curves.items()}, path, title)


def adapted_rounds(runs: Sequence[Sequence[Mapping[str, Any]]]) -> set[int]:
    """The rounds adapted inside a CLP in at least half of ``runs`` (one per seed; with one run, its adapted CLP rounds)."""
    counts: dict[int, int] = {}
    for records in runs:
        for rnd in {int(r["round"]) for r in records if r.get("agg_clp") and r.get("agg_adapted")}:
            counts[rnd] = counts.get(rnd, 0) + 1
    return {rnd for rnd, n in counts.items() if 2 * n >= len(runs)}


def plot_compare_clp_seeds(groups: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], path: str | Path, title: str = "") -> bool:
    """:func:`plot_compare_clp` with several runs (seeds) per variant: their mean accuracy (at the rounds every seed
    measured, :func:`~chillfl.metrics.spread.seed_band`) as one line with a shaded band of ± 1 std over the seeds (as
    the comparison's ``curves.png``; none for a variant of one run), dots at the rounds adapted in at least half of them.

    ``groups`` in the comparison's variant order, a variant with no finished run as an empty list (a legend entry
    that says so; it keeps its colour slot). Returns False (nothing written) when no variant has a global accuracy curve.
    """
    bands = {label: seed_band([nulls_as_nan(records, "global_acc") for records in runs], "global_acc") if runs else ([], [], [])
             for label, runs in groups.items()}  # a null breaks the line, as a NaN does
    if not any(rounds for rounds, _, _ in bands.values()):
        return False
    seeded = any(len(runs) > 1 for runs in groups.values())
    fig = Figure(figsize=(9.5, 4.5))  # 6.5 inches of axes beside the legend
    ax = fig.subplots()
    # a variant's colour and style are its index among all of groups' variants (variant_style), as in curves.png: by
    # position among the drawn ones, a variant after one with no finished run took that one's colour
    for i, (label, (rounds, acc, std)) in enumerate(bands.items()):
        runs = groups[label]
        if not runs:
            no_finished_run(label, (ax,))
            continue
        if not rounds:  # finished, but no round measured a global accuracy (no global model): said, not dropped silently
            ax.plot([], [], " ", label=literal(f"{label}: no global accuracy measured"))
            continue
        shown = f"{label} (n={len(runs)})" if seeded else label
        colour, style = variant_style(i)
        (line,) = ax.plot(rounds, acc, label=literal(shown), color=colour, ls=style, marker=gap_marker(rounds))
        if len(runs) > 1:  # the seeds' spread, as the comparison's curves.png shades it (one seed: no band)
            ax.fill_between(rounds, [m - s for m, s in zip(acc, std)], [m + s for m, s in zip(acc, std)], color=line.get_color(), alpha=0.2, linewidth=0)
            lone_spread(ax, rounds, acc, std, colour)  # a 1-round band has no width: an error bar instead
        clp = adapted_rounds(runs)
        marked = [(r, a) for r, a in zip(rounds, acc) if r in clp]
        if marked:
            ax.plot([m[0] for m in marked], [m[1] for m in marked], "o", ms=4, color=line.get_color())
    what = f"accuracy, mean over seeds, {SPREAD}" if seeded else "accuracy"
    key = "\n(dots: adapted CLP rounds in at least half the seeds)" if seeded else " (dots: adapted CLP rounds)"  # on a line of its own where long
    # the title over the axes it names, wrapped to their width: a long folder name ran past the figure's edges
    ax.set(xlabel="round", ylabel="global accuracy", title=literal(wrapped((f"{title}: {what}" if title else what.capitalize()) + key, AXES_INCHES, 12)))
    percent_axis(ax)
    integer_rounds(ax)
    ax.grid(alpha=0.3)
    shared_legend(fig, (ax,))  # beside the axes: inside, it covered the curves
    save_png(fig, path, dpi=110)
    return True


AXES_INCHES = 6.0
"""About the width of clp_curves.png's axes beside its legend, to which its title is wrapped."""


register_figure("clp", FigureSpec("clp.png", plot_clp, "accuracy and FGN(t) with the critical learning periods shaded (PA3Fed Fig. 3)"))


def clp_groups(folder: Path) -> dict[str, list[list[dict[str, Any]]]]:
    """Variant label -> the records of its finished runs (one per seed) under ``folder``, a run folder or a compare
    folder, in the compare table's row order, a variant of the comparison with no finished run as an empty list (it
    keeps its place, hence its colour, and the legend says why it has no line); a ConfigError (one line) when no run is
    PA3Fed's (no ``agg_clp``)."""
    runs = run_folders(folder)  # the folder itself, or its finished sub-folders; a ConfigError when there is none
    labels = comparison_labels(folder)  # run folder name -> variant label, seeds of one variant alike
    table = folder / "table.json"
    if not labels and table.is_file():  # an older comparison without sweep.json: its table names one run per variant
        try:
            labels = {safe_name(str(row["variant"])): str(row["variant"]) for row in json_loads(table.read_text(encoding="utf-8"))}
        except (OSError, ValueError, KeyError, TypeError):
            labels = {}
    groups: dict[str, list[list[dict[str, Any]]]] = {}
    for run in runs:
        groups.setdefault(labels.get(run.name, run.name), []).append(read_records(run / METRICS))
    if not any("agg_clp" in r for runs_ in groups.values() for records in runs_ for r in records):
        raise ConfigError(str(folder), f"holds no PA3Fed run (no {METRICS} with agg_clp in it or its sub-folders): no CLP rounds to draw")
    order = list(dict.fromkeys(labels.values()))
    for label in order:  # a comparison's (sweep.json's) every variant, finished or not
        groups.setdefault(label, [])
    return dict(sorted(groups.items(), key=lambda item: order.index(item[0]) if item[0] in order else len(order)))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m chillfl.plots.pa3fed FOLDER``: write ``clp_curves.png`` (Fig. 4 style) into a compare or run folder."""
    import argparse

    parser = argparse.ArgumentParser(prog=PROG, description=main.__doc__)
    parser.add_argument("folder", type=Path, help="a `chillfl compare` result folder, or one run's folder")
    args = parser.parse_args(argv)
    folder: Path = args.folder

    def draw() -> list[str]:
        groups = clp_groups(folder)
        out = folder / CLP_FIGURE
        drawn = (plot_compare_clp({label: runs[0] if runs else [] for label, runs in groups.items()}, out, title=folder.name)
                 if all(len(runs) <= 1 for runs in groups.values()) else plot_compare_clp_seeds(groups, out, title=folder.name))
        if not drawn:
            raise ConfigError(str(folder), "no run has a global accuracy curve (global_acc): nothing to draw")
        return [str(out)]

    return run_tool(PROG, draw)


if __name__ == "__main__":
    raise SystemExit(main())

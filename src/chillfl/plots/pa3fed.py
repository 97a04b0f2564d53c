"""PA3Fed plots: accuracy with the critical learning periods shaded, and the FGN curve (PA3Fed Figs. 3-4).

Both read only metrics.jsonl records: ``global_acc`` and PA3Fed's
``agg_fgn`` (Eq. 5) and ``agg_clp`` (Eq. 6 verdict of the round).
A CLP round ``t`` is shaded as the interval ``[t - 0.5, t + 0.5]``, so
consecutive CLP rounds merge into one band as in Fig. 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.extras import need

need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError
from matplotlib.axes import Axes  # noqa: E402

from chillfl.config import safe_name  # noqa: E402
from chillfl.storage.results import read_metrics, series  # noqa: E402
from chillfl.plots.registry import FigureSpec, register_figure  # noqa: E402
from chillfl.plots.figure import Figure, finish_figure, log_scale, save_png  # noqa: E402
from chillfl.plots.run import integer_rounds  # noqa: E402

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
    fgn_rounds, fgn = series(records, "agg_fgn")
    if not fgn_rounds:
        return False
    spans = clp_spans(records)
    fig = Figure(figsize=(11, 4))
    ax_acc, ax_fgn = fig.subplots(1, 2)
    acc_rounds, acc = series(records, "global_acc")
    shade_clp(ax_acc, spans)
    if acc_rounds:
        ax_acc.plot(acc_rounds, acc, marker=".", label="global model, test set")
    ax_acc.set(xlabel="round", ylabel="accuracy", title="Accuracy (CLP shaded)")
    shade_clp(ax_fgn, spans)
    ax_fgn.plot(fgn_rounds, fgn, marker=".", color="C1", label="FGN(t), Eq. 5")
    logged = min(fgn) > 0
    if logged:  # labelled 0.05, 0.1, ...: matplotlib's 6x10^-2 and 10^-1 left most of a decade's values unlabelled
        log_scale(ax_fgn, "y")
    ax_fgn.set(xlabel="round", ylabel="FGN (log scale)" if logged else "FGN", title="Federated gradient norm")  # a dip reads deeper on a log axis
    for ax in (ax_acc, ax_fgn):
        integer_rounds(ax)
    finish_figure(fig, (ax_acc, ax_fgn), path, title)
    return True


def plot_compare_clp(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str = "") -> bool:
    """Fig. 4 style: every variant's accuracy curve; the CLP rounds of each PA3Fed variant as dots on its curve.

    Returns False (nothing written) when no variant has a global accuracy curve.
    """
    if not any(series(records, "global_acc")[0] for records in curves.values()):
        return False
    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    for i, (label, records) in enumerate(curves.items()):
        rounds, acc = series(records, "global_acc")
        if not rounds:
            continue
        (line,) = ax.plot(rounds, acc, label=label, color=f"C{i % 10}", ls="-" if "pa3" in label.lower() else "--")
        clp = {int(r["round"]) for r in records if r.get("agg_clp") and r.get("agg_adapted")}
        marked = [(r, a) for r, a in zip(rounds, acc) if r in clp]
        if marked:
            ax.plot([m[0] for m in marked], [m[1] for m in marked], "o", ms=4, color=line.get_color())
    ax.set(xlabel="round", ylabel="global accuracy", title=(f"{title}: accuracy" if title else "Accuracy") + " (dots: adapted CLP rounds)")  # the key to the dots, also under a title
    integer_rounds(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path, dpi=110)
    return True


register_figure("clp", FigureSpec("clp.png", plot_clp, "accuracy and FGN(t) with the critical learning periods shaded (PA3Fed Fig. 3)"))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m chillfl.plots.pa3fed COMPARE_FOLDER``: write ``clp_curves.png`` (Fig. 4 style) into it."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m chillfl.plots.pa3fed", description=main.__doc__)
    parser.add_argument("folder", help="a `chillfl compare` result folder")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    runs = sorted(p.parent for p in folder.glob("*/metrics.jsonl"))
    if not runs:
        parser.error(f"no run folders with metrics.jsonl under {folder}")
    order = {}
    table = folder / "table.json"
    if table.is_file():  # keep the compare table's row order and labels
        labels = [row["variant"] for row in json.loads(table.read_text(encoding="utf-8"))]
        order = {safe_name(label): label for label in labels}
    curves = {}
    for run in sorted(runs, key=lambda p: list(order).index(p.name) if p.name in order else len(order)):
        try:
            curves[order.get(run.name, run.name)] = read_metrics(run)  # decoded: a NaN loss is NaN, not "not measured"
        except ValueError as exc:  # a garbled line or non-finite marker: one line, not a traceback
            parser.error(f"{run / 'metrics.jsonl'} is unreadable: {exc}")
    out = folder / "clp_curves.png"
    if not plot_compare_clp(curves, out, title=folder.name):
        parser.error("no run has a global accuracy curve")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

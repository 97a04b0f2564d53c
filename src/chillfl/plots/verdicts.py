"""``reproduce-PAPER.png``: each claim's paired difference over seeds against 0, or its bytes ratio against the paper's bound.

A reader judges a verdict faster from a forest plot than from a row of
``+1.28 ± 2.82 [95 % CI -5.7, +8.3]``: every seed's value is a dot, the mean a
marker coloured by the verdict, the 95 % interval a bar, and the line the
verdict is read against (0 points; the paper's byte bound) is drawn. An
accuracy difference lies in [-100, +100] points: a bar whose interval reaches
past that is drawn clipped to it, its claim's label ends in
:data:`~chillfl.metrics.stats.CLIPPED`, and the legend says so.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from chillfl.metrics.stats import CLIPPED, Interval

COLOURS = {"reproduces": "tab:green", "opposite": "tab:red"}
"""Verdict -> marker colour; any other verdict ("does not at this scale") is grey."""


@dataclass(frozen=True)
class VerdictPoint:
    """One claim as plotted: its values per seed, their mean and 95 % interval (accuracy), the verdict."""

    label: str
    metric: Literal["accuracy", "bytes"]
    per_seed: tuple[float, ...]
    """Accuracy: variant - baseline in points, per seed. Bytes: bytes(variant) / bytes(baseline), per seed."""
    mean: float
    interval: Interval | None
    """As shown: clipped to the metric's range (``clipped`` says an end moved); None with one seed."""
    verdict: str
    bound: float | None = None
    """Bytes claims: the paper's bound on the ratio."""


CLIPPED_LEGEND = f"{CLIPPED} bar clipped to ±100 points (the 95 % CI reaches past it)"
"""The legend entry of an accuracy panel with a clipped bar."""


def label(point: VerdictPoint) -> str:
    """The claim's row label, ending in :data:`~chillfl.metrics.stats.CLIPPED` when its bar is clipped to the range."""
    return point.label + (f" {CLIPPED}" if point.interval is not None and point.interval.clipped else "")


def plot_verdicts(points: Sequence[VerdictPoint], path: str | Path, title: str = "") -> None:
    """One panel per metric present (accuracy difference; bytes ratio), one row per claim, top to bottom."""
    from chillfl.plots.figure import Figure, literal, save_png  # lazy: MissingExtra without the plots extra, while VerdictPoint stays importable

    panels = [m for m in ("accuracy", "bytes") if any(p.metric == m for p in points)]
    rows = max(sum(p.metric == m for p in points) for m in panels)
    widths = [2.0 if m == "accuracy" else 1.0 for m in panels]
    fig = Figure(figsize=(4.5 + 3.5 * sum(widths), 1.2 + 0.75 * rows))
    axes = fig.subplots(1, len(panels), squeeze=False, gridspec_kw={"width_ratios": widths})
    for ax, metric in zip(axes[0], panels):
        mine = [p for p in points if p.metric == metric]
        for y, p in enumerate(reversed(mine)):
            ax.scatter(p.per_seed, [y] * len(p.per_seed), s=14, color="0.55", zorder=2, label="one seed" if y == 0 else None)
            colour = COLOURS.get(p.verdict, "0.35")
            if p.interval is not None:
                ax.errorbar([p.mean], [y], xerr=[[p.mean - p.interval.low], [p.interval.high - p.mean]], fmt="none", ecolor=colour, capsize=4, zorder=3)
            ax.scatter([p.mean], [y], s=60, marker="D", color=colour, zorder=4)
            ax.annotate(p.verdict, (p.mean, y), xytext=(0, 7), textcoords="offset points", ha="center", fontsize=7, color=colour,
                        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85}, zorder=5)
        ax.set_yticks(range(len(mine)), [literal(textwrap.fill(label(p), 48)) for p in reversed(mine)], fontsize=7)
        ax.set_ylim(-0.7, len(mine) - 0.3)
        if metric == "accuracy":
            ax.axvline(0.0, color="black", lw=1)
            if any(p.interval is not None and p.interval.clipped for p in mine):  # a legend entry, not a bar: what the mark means
                ax.plot([], [], " ", label=CLIPPED_LEGEND)
            ax.set(xlabel="variant - baseline, accuracy points (diamond: mean; bar: 95 % CI)", title="Accuracy claims, paired over seeds")
        else:
            for bound in sorted({p.bound for p in mine if p.bound is not None}):
                ax.axvline(bound, color="tab:green", ls="--", lw=1, label=f"paper's bound {bound:g}")
            ax.axvline(1.0, color="black", lw=1)
            ax.set(xlabel="bytes(variant) / bytes(baseline) (diamond: mean)", title="Communication claims")
        ax.grid(alpha=0.3, axis="x")
        ax.legend(fontsize=7, loc="best")
    if title:
        fig.suptitle(literal(title))
    fig.tight_layout()
    save_png(fig, path, dpi=110)

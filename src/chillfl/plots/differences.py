"""``differences.png``: each variant's paired difference from the baseline over seeds, as a forest plot.

A comparison over seeds prints a row of ``-0.58 ± 2.47 [-6.72, +5.56]`` per variant; with twenty
variants a reader judges them faster from a picture: per variant, each seed's difference is a dot, the
mean a hollow diamond under the dots (a filled one on top hid both dots of 2 seeds), its 95 % interval a
bar, against the line at 0 (no difference). The diamond is green when the whole interval lies above 0,
red when below, grey when it crosses 0. A comparison with
``[compare] local = true`` (personalised methods) draws a second panel of the local-accuracy differences,
the number such a comparison is about.

A difference of two accuracies lies in [-100, +100] points (its statistic's ``range`` in ``table.json``): a bar
whose interval reaches past it is drawn clipped to it, as the table prints it, its variant's label ends in
:data:`~chillfl.metrics.stats.CLIPPED` and the caption says so.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from chillfl.metrics.stats import CLIPPED, Bounds, Interval, clip_interval

PANELS = {"delta_acc": "global accuracy", "delta_local_acc": "local accuracy"}
"""``table.json``'s paired-difference fields that get a panel, and what they differ in."""


@dataclass(frozen=True)
class Difference:
    """One variant's paired difference from the baseline, in accuracy points (x 100 of ``table.json``'s fractions)."""

    label: str
    per_seed: tuple[float, ...]
    mean: float
    interval: Interval | None
    """The 95 % interval in points as shown: clipped to the statistic's range (``clipped`` says an end moved); None with
    one seed (no interval)."""
    side: Literal["above", "below", "crosses"]


def differences(rows: Sequence[Mapping[str, Any]], baseline: str, key: str) -> list[Difference]:
    """The ``key`` difference (``delta_acc``/``delta_local_acc``) of every row but the baseline's, in the rows' order.

    A row without it (every seed of the variant failed, or no local accuracy was measured) is left out.
    """
    out = []
    for row in rows:
        stat = row.get(key)
        if row["variant"] == baseline or not stat:
            continue
        seeds = tuple(100.0 * v for v in stat["per_seed"] if v is not None)
        low, high, bounds = stat.get("ci_low"), stat.get("ci_high"), stat.get("range")
        interval = None
        if low is not None and high is not None and stat.get("n", 0) > 1:
            interval = clip_interval(100.0 * low, 100.0 * high, None if bounds is None else Bounds(*bounds).scaled(100.0))
        side: Literal["above", "below", "crosses"] = "crosses"
        if interval is not None and interval.low > 0:
            side = "above"
        elif interval is not None and interval.high < 0:
            side = "below"
        out.append(Difference(str(row["variant"]), seeds, 100.0 * stat["mean"], interval, side))
    return out


COLOURS = {"above": "tab:green", "below": "tab:red", "crosses": "tab:grey"}
LINEAR_WITHIN = 2.0
"""Points within which a panel's axis stays linear when its values span more than :data:`SPAN` (symmetric log beyond)."""
SPAN = 20.0
TICKS = (-100, -50, -20, -10, -5, -2, -1, 0, 1, 2, 5, 10, 20, 50, 100)
"""The symmetric log axis's ticks, as plain numbers (points)."""
TITLE_CHARS = 80
"""Characters of the caption per line and panel (a 6.5-inch panel at 10 pt holds about 85)."""


PANEL_TEXT_INCHES = 5.0
"""The width a panel's x label is wrapped to: a 6.5-inch panel less its margins (its row labels on the left)."""


TICK_GAP = 0.08
"""The least distance between two labelled ticks of a symmetric log axis, as a share of the panel's width (about a
third of an inch on a 6.5-inch panel: a "-100" at 10 pt). -50, -20 and -10 lie that close on it, and ran into each other."""


def spaced_ticks(ax: Any, candidates: Sequence[float]) -> list[float]:
    """The ``candidates`` in ``ax``'s current x view that lie at least :data:`TICK_GAP` of its width from each other on
    its scale, taken from 0 outward (the nearer to 0 kept first: the linear part, where most differences lie), in order."""
    low, high = ax.get_xlim()  # autoscaled to what is drawn
    to_axes = ax.transScale + ax.transLimits  # data -> 0..1 across the panel, on its scale
    kept: list[tuple[float, float]] = []
    for tick in sorted((t for t in candidates if low <= t <= high), key=abs):
        at = float(to_axes.transform((tick, 0.0))[0])
        if all(abs(at - other) >= TICK_GAP for _, other in kept):
            kept.append((tick, at))
    return sorted(t for t, _ in kept)


def drawn_values(diffs: Sequence[Difference]) -> list[float]:
    """Every number a panel draws: the seeds, the means and the interval ends."""
    return [v for d in diffs for v in (*d.per_seed, d.mean, *(() if d.interval is None else (d.interval.low, d.interval.high)))]


def far_reaching(diffs: Sequence[Difference]) -> bool:
    """Whether a panel needs a symmetric log axis: a -60 outlier would squeeze every +-1 difference into its zero line."""
    values = drawn_values(diffs)
    return max(values) - min(values) > SPAN


def caption(diffs: Sequence[Difference]) -> str:
    """What the marks are, with how many seeds: "(dots: seeds; bar: 95 % CI)" read the same at 1 seed, where no
    bar is drawn (one seed has no interval) and the one dot sits in its mean's hollow diamond; a bar clipped to the range is named."""
    counts = sorted({len(d.per_seed) for d in diffs})
    seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    dots = f"dots: {seeds} seed{'' if counts == [1] else 's'}"
    if all(d.interval is None for d in diffs):
        return f"{dots}; no 95 % CI from one seed"
    if any(d.interval is not None and d.interval.clipped for d in diffs):
        return f"{dots}; bar: 95 % CI; {CLIPPED} bar clipped to ±100 points, the CI reaches past it"
    return f"{dots}; bar: 95 % CI"


def clipped(one: Difference) -> bool:
    """Whether ``one``'s bar is drawn clipped to the statistic's range."""
    return one.interval is not None and one.interval.clipped


def row_label(one: Difference, also_clipped: bool = False) -> str:
    """A variant's row label, ending in :data:`~chillfl.metrics.stats.CLIPPED` when its bar is clipped to the range
    (``also_clipped``: its bar in another panel that shares these labels is)."""
    return one.label + (f" {CLIPPED}" if clipped(one) or also_clipped else "")


def mark_clipped_ends(ax: Any, one: Difference, y: float, colour: str) -> None:
    """:data:`~chillfl.metrics.stats.CLIPPED` at each end of ``one``'s bar that the range cut (+-100 points), in the
    panel itself: the mark on the row label alone came from the first panel, so a local bar clipped beside a global one
    that was not read as the whole interval."""
    if one.interval is None or not one.interval.clipped:
        return
    for end, side in ((one.interval.low, "right"), (one.interval.high, "left")):
        if abs(end) >= CLIP_AT:  # an end at the range's bound is the one clipping moved (an interval crosses 0 at most once)
            ax.annotate(CLIPPED, (end, y), xytext=(-4 if side == "left" else 4, 3), textcoords="offset points", ha=side,
                        va="bottom", fontsize=9, color=colour, fontweight="bold")


CLIP_AT = 100.0
"""Points at which a difference's interval is clipped (its statistic's range, +-1 as fractions)."""


def plot_differences(rows: Sequence[Mapping[str, Any]], baseline: str, path: str | Path, title: str = "", local: bool = False) -> bool:
    """Write the forest plot at ``path``; one panel per difference present (global; local with ``local``).

    Returns False (nothing written) when no variant has a difference to draw (a comparison of the baseline alone).
    """
    from chillfl.plots.figure import Figure, literal, save_png, wrapped  # lazy: MissingExtra without the plots extra

    keys = [k for k in PANELS if (local or k != "delta_local_acc")]
    panels = [(k, found) for k in keys if (found := differences(rows, baseline, k))]
    if not panels:
        return False
    height = max(len(d) for _, d in panels)
    same_rows = len({tuple(one.label for one in d) for _, d in panels}) == 1  # the labels once, on the left
    fig = Figure(figsize=(6.5 * len(panels), 1.2 + 0.42 * height))
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=same_rows)
    for i_panel, (ax, (key, diffs)) in enumerate(zip(axes[0], panels)):
        scale = ""
        if far_reaching(diffs):  # before drawing, so that the view fits the data on this scale
            ax.set_xscale("symlog", linthresh=LINEAR_WITHIN)
            scale = f"; log beyond ±{LINEAR_WITHIN:g}"
        for i, one in enumerate(diffs):
            y = len(diffs) - 1 - i  # first row at the top, as in the table
            colour = COLOURS[one.side]
            if one.interval is not None:
                ax.plot((one.interval.low, one.interval.high), (y, y), color=colour, lw=2.5, alpha=0.6)
            # the mean a hollow diamond under the seeds' dots: filled and on top, it hid them (2 seeds lie near their mean)
            ax.scatter([one.mean], [y], s=60, marker="D", facecolors="none", edgecolors=colour, linewidths=1.8, zorder=3)
            ax.scatter(one.per_seed, [y] * len(one.per_seed), s=12, color="black", alpha=0.6, zorder=4)
            mark_clipped_ends(ax, one, y, colour)
        ax.axvline(0.0, color="black", lw=1)
        if i_panel == 0 or not same_rows:  # shared labels say a clip in any panel (each bar marks its own ends)
            ax.set_yticks(range(len(diffs)), [literal(row_label(one, same_rows and any(clipped(d[i]) for _, d in panels)))
                                              for i, one in reversed(list(enumerate(diffs)))], fontsize=8)
        ax.set_ylim(-0.6, len(diffs) - 0.4)  # half a row above and below: with two rows the autoscaled view put them on the frame
        ax.margins(x=0.05)
        if scale:  # the ticks that fit the final view, spaced apart on it
            ax.set_xticks(spaced_ticks(ax, TICKS), minor=False)
            ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")
        # wrapped to the panel's width: a long baseline's label ran into the next panel's
        ax.set(xlabel=literal(wrapped(f"minus {baseline}'s, points{scale}", PANEL_TEXT_INCHES)), title=PANELS[key].capitalize())
        ax.grid(axis="x", alpha=0.3)
    heading = (f"{title}: " if title else "") + f"difference from the baseline ({caption([d for _, found in panels for d in found])})"
    fig.suptitle(literal(textwrap.fill(heading, TITLE_CHARS * len(panels))), fontsize=10)  # wrapped: a clipped bar's note ran past one panel's width
    fig.tight_layout()
    save_png(fig, path, dpi=110)
    return True

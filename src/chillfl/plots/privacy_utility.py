"""``privacy_utility.png``: a comparison's final accuracy against the epsilon each private variant spent.

The standard figure of a DP paper: one point per variant that spent a privacy budget (its table row has ``epsilon``),
at the epsilon it spent (mean over its seeds) and its final global test accuracy (mean over seeds), with the 95 %
interval of that mean as a vertical bar; every variant that spent none is a horizontal line at its accuracy, named
in the legend: what the budget costs against the same method without DP. Drawn from the comparison's rows
(``table.json``'s, one seed's or over seeds), so it says what the table says.

An epsilon bounds its own mechanism's privacy unit (a client, a sample, a soft-label row) under its own neighbouring
relation at its own delta (:func:`chillfl.report.caveats.epsilon_caveat`): epsilons of different ones do not compare.
The caller names what each variant's epsilon bounds (``units``: label -> text); points of one unit share a marker,
a second legend keys the markers, and the note under the title says that different markers do not compare.

Choices
-------
* Which variants are points is read from the rows' ``epsilon`` alone, never from a method or mechanism name: a row
  with one is a point, a finished row without one and without a unit is a reference line. A row with a unit but no
  finite epsilon (its accountant gave none) is neither: it spent a budget the figure cannot place.
* x is the epsilon spent by the last round, the mean over the seeds that recorded one (the table's ``epsilon``
  column); on a log scale when the points' epsilons span more than :data:`LOG_SPAN` (a factor of 10).
* The bar is the Student-t 95 % interval of the mean over seeds, clipped to [0, 100] % as the table prints it (an
  end moved: the label ends in :data:`~chillfl.metrics.stats.CLIPPED`); one seed has none, and the note says so.
* Points at one epsilon (two methods under one ``target_epsilon``) are drawn a few typographic points apart
  (:func:`dodges`), so that one bar does not hide another; their data stay as they are.
"""

from __future__ import annotations

import math

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chillfl.metrics.stats import CLIPPED, FRACTION, Interval, clip_interval
from chillfl.plots.styles import variant_style

LOG_SPAN = 10.0
"""The x axis is logarithmic when the largest epsilon exceeds this many times the smallest."""
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
"""One marker per unit (mechanism, neighbours, delta), in order of first appearance; cycled past eight."""
PERCENT = FRACTION.scaled(100.0)
"""An accuracy's range in %, which a point's bar is clipped to."""
DODGE = 7.0
"""Typographic points between the points drawn at one epsilon (:func:`dodges`)."""
DODGE_DIGITS = 4
"""Significant digits to which two epsilons are one (:func:`dodges`)."""
FILLS = ("full", "none", "left", "bottom")
"""A point's marker fill by its variant's tens (:func:`point_style`): ``variant_style`` repeats colours past ten, and a
point has no line to dash, so the 11th variant's point was the 1st's."""
LEVELS = ("--", ":", "-.", (0, (6, 2, 1, 2, 1, 2)))
"""A reference level's line style by its variant's tens, for the same reason (the 1st and 11th were both dashed)."""
NOTE_CHARS = 110
"""Characters per line of the note under the title (a 10-inch figure at 8 pt holds about 120)."""


def point_style(index: int) -> tuple[str, str, Any]:
    """(colour, marker fill, reference line style) of the ``index``-th variant: its colour as in every figure
    (:func:`~chillfl.plots.styles.variant_style`), its tens told apart by fill (:data:`FILLS`) and style (:data:`LEVELS`)."""
    tens = index // 10
    return variant_style(index)[0], FILLS[tens % len(FILLS)], LEVELS[tens % len(LEVELS)]


@dataclass(frozen=True)
class UtilityPoint:
    """One private variant as drawn: accuracy in % (x 100 of the rows' fractions), epsilon as spent."""

    label: str
    epsilon: float
    """The epsilon spent by the last round; over seeds, their mean."""
    accuracy: float
    """Final global test accuracy %, over seeds their mean."""
    interval: Interval | None
    """The mean's 95 % interval in %, clipped to [0, 100] (``clipped`` says an end moved); None with one seed."""
    seeds: int
    unit: str
    """What its epsilon bounds (from the caller's ``units``; "" when not given)."""
    index: int = 0
    """Its row's position in ``rows`` (the comparison's variant order): its colour, the one the comparison's other
    figures give that variant (:func:`~chillfl.plots.styles.variant_style`)."""


@dataclass(frozen=True)
class Reference:
    """A variant that spent no budget: its final accuracy in % (over seeds, the mean), drawn as a horizontal line."""

    label: str
    accuracy: float
    index: int = 0
    """Its row's position in ``rows``: its colour, as :attr:`UtilityPoint.index`."""


@dataclass(frozen=True)
class Utility:
    """What the figure draws: the points in the rows' order, then the reference lines."""

    points: list[UtilityPoint]
    references: list[Reference]

    @property
    def units(self) -> list[str]:
        """The points' units in order of first appearance: one marker each."""
        return list(dict.fromkeys(p.unit for p in self.points))

    @property
    def log_x(self) -> bool:
        """Whether the epsilons span more than :data:`LOG_SPAN` (all > 0: a log axis has no 0)."""
        eps = [p.epsilon for p in self.points]
        return bool(eps) and min(eps) > 0 and max(eps) > LOG_SPAN * min(eps)


def _mean_and_interval(value: Any) -> tuple[float, Interval | None, int] | None:
    """A row's ``final_acc`` or ``epsilon`` as (mean, 95 % interval as computed, seeds): one seed's table holds a number
    (no interval), the table over seeds a statistic (``mean``, ``ci_low``, ``ci_high``, ``n``)."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value), None, 1
    low, high = value.get("ci_low"), value.get("ci_high")
    interval = None if low is None or high is None else Interval(float(low), float(high), False)
    return float(value["mean"]), interval, int(value.get("n", 1))


def utility_points(rows: Sequence[Mapping[str, Any]], units: Mapping[str, str] | None = None) -> Utility:
    """The points and reference lines of ``rows`` (a comparison's, either table's); ``units``: label -> what that
    variant's epsilon bounds (the private variants'). A row without a final accuracy (failed at every seed), or whose
    epsilon is unbounded (inf: the table shows it), is left out."""
    units = units or {}
    points, references = [], []
    for index, row in enumerate(rows):
        label = str(row["variant"])
        acc = _mean_and_interval(row.get("final_acc"))
        if acc is None:
            continue
        eps = _mean_and_interval(row.get("epsilon"))
        mean, interval, seeds = acc
        if eps is not None and not math.isfinite(eps[0]):
            continue  # an epsilon the accountant could not bound (inf): no place on the axis; the table says it
        if eps is not None:
            # an accuracy is a fraction whatever the row's ``range`` says (an older table.json has none): shown in [0, 100] %
            shown = None if interval is None else clip_interval(100.0 * interval.low, 100.0 * interval.high, PERCENT)
            points.append(UtilityPoint(label, eps[0], 100.0 * mean, shown, seeds, units.get(label, ""), index))
        elif label not in units:
            references.append(Reference(label, 100.0 * mean, index))
    return Utility(points, references)


def note(utility: Utility) -> str:
    """The line under the title: what a point and its bar are, and which epsilons compare (one unit: all; else none
    across markers)."""
    counts = sorted({p.seeds for p in utility.points})
    seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    parts = [f"point: mean over {seeds} seed{'' if counts == [1] else 's'}"]
    if all(p.interval is None for p in utility.points):
        parts.append("no 95 % CI from one seed")
    else:
        parts.append("bar: 95 % CI" + (f" ({CLIPPED}: clipped to [0, 100] %, the CI reaches past it)" if any(p.interval is not None and p.interval.clipped for p in utility.points) else ""))
    if utility.references:
        parts.append("lines: variants without DP")
    known = [u for u in utility.units if u]
    if len(utility.units) > 1:
        parts.append("each marker is one mechanism, neighbouring relation and delta: epsilons of different markers bound different things and do not compare")
    elif known:
        parts.append(f"every epsilon: {known[0]}")
    return "; ".join(parts)


def dodges(points: Sequence[UtilityPoint]) -> list[float]:
    """Each point's horizontal shift in typographic points: the points at one epsilon (to :data:`DODGE_DIGITS`
    significant digits: ``FedAvg, eps=8`` and ``FedAvg + chilling, eps=8`` spend the same) are spread :data:`DODGE`
    apart around it, so that their bars do not hide each other; a point alone at its epsilon stays on it."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault(f"{p.epsilon:.{DODGE_DIGITS}g}", []).append(i)
    shifts = [0.0] * len(points)
    for members in groups.values():
        for k, i in enumerate(members):
            shifts[i] = DODGE * (k - (len(members) - 1) / 2)
    return shifts


def point_label(point: UtilityPoint) -> str:
    """A point's legend entry: its variant, and :data:`~chillfl.metrics.stats.CLIPPED` when its bar is clipped."""
    return point.label + (f" {CLIPPED}" if point.interval is not None and point.interval.clipped else "")


def plot_privacy_utility(rows: Sequence[Mapping[str, Any]], path: str | Path, title: str = "", units: Mapping[str, str] | None = None) -> bool:
    """Write ``privacy_utility.png`` at ``path``; False (nothing written) when no row spent a privacy budget."""
    utility = utility_points(rows, units)
    if not utility.points:
        return False
    from chillfl.plots.figure import Figure, literal, save_png  # lazy, and first: MissingExtra without the plots extra

    from matplotlib.lines import Line2D
    from matplotlib.ticker import LogFormatter
    from matplotlib.transforms import offset_copy

    marker_of = {unit: MARKERS[i % len(MARKERS)] for i, unit in enumerate(utility.units)}
    fig = Figure(figsize=(10, 5), layout="constrained")
    ax = fig.subplots()
    if utility.log_x:
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}")  # 1, 10, 100, not 10^0
        ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))  # 2, 3, ... within two decades only
    handles: list[Any] = []  # the legend's entries: errorbar containers, then lines
    # a variant's colour is its row's (its variant's) index, as in curves.png: by position among the points it was another
    for p, shift in zip(utility.points, dodges(utility.points)):
        err = None if p.interval is None else [[p.accuracy - p.interval.low], [p.interval.high - p.accuracy]]
        drawn = ax.errorbar([p.epsilon], [p.accuracy], yerr=err, fmt=marker_of[p.unit], color=point_style(p.index)[0], ms=7, capsize=4,
                            fillstyle=point_style(p.index)[1], label=literal(point_label(p)))
        if shift:  # side by side, the data unchanged; moved after drawing, so that the axes' limits still fit the data
            moved = offset_copy(ax.transData, fig=fig, x=shift, y=0.0, units="points")
            for artist in drawn.get_children():
                artist.set_transform(moved)
        handles.append(drawn)
    for ref in utility.references:  # dashed (dotted past ten variants ...) whatever its variant's line: a level, not a point's line
        colour, _, level = point_style(ref.index)
        handles.append(ax.axhline(ref.accuracy, color=colour, ls=level, lw=1.2, label=literal(f"{ref.label} (no DP): {ref.accuracy:.2f} %")))
    ax.set(xlabel="epsilon spent by the last round (each at its own delta)" + ("; log scale" if utility.log_x else ""), ylabel="final global test accuracy %")
    ax.grid(alpha=0.3)
    # figure legends "outside": constrained layout makes room for both (a second axes legend kept by add_artist got none)
    fig.legend(handles=handles, fontsize=7, loc="outside right upper", title="variant", title_fontsize=8)
    if any(utility.units):
        keys = [Line2D([], [], ls="", marker=marker_of[u], color="black", label=literal(u or "(not given)")) for u in utility.units]
        fig.legend(handles=keys, fontsize=7, loc="outside right lower", title="epsilon bounds", title_fontsize=8)
    ax.set_title(textwrap.fill(note(utility), NOTE_CHARS), fontsize=8)
    fig.suptitle(literal((f"{title}: " if title else "") + "final accuracy against epsilon spent"), fontsize=10)
    save_png(fig, path, dpi=110)
    return True

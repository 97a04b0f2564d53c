"""Accuracy against cumulative communication (SCARLET Figs. 7, 9-12) and the cost to reach a target.

SCARLET reports accuracy against "cumulative communication cost ... the total
amount of data exchanged between the server and clients ... summed over all
clients across communication rounds" (Sec. IV-A), for the server model
(left panels) and the clients' own models (right panels), plus the cumulative
cost to reach a target accuracy. Every round record of both protocols carries
``bytes_cumulative``; these functions read only the records.

Choices
-------
* Units are decimal (1 MB = 10^6 bytes), picked from the largest value shown
  (B, kB, MB or GB) so that small CPU runs and full-size runs both read well.
* The cost to reach a target is the cumulative bytes *through* the first round
  whose accuracy is >= target (the bytes of that round included), as in
  :func:`~chillfl.metrics.communication.bytes_to_reach`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.metrics.communication import accuracy_vs_bytes
from chillfl.plots.registry import FigureSpec, register_figure
from chillfl.plots.stop import STOP_MARKER, stop_label, stop_point
from chillfl.plots.styles import variant_style

UNITS: tuple[tuple[str, float], ...] = (("GB", 1e9), ("MB", 1e6), ("kB", 1e3), ("B", 1.0))
PANELS: tuple[tuple[str, str], ...] = (("global_acc", "server model, global test set"), ("local_acc", "client models, own test splits"))


def unit_for(max_bytes: float) -> tuple[str, float]:
    """The largest decimal unit in which ``max_bytes`` is at least 1 (bytes below 1 kB)."""
    for name, scale in UNITS:
        if max_bytes >= scale:
            return name, scale
    return "B", 1.0


def plot_compare_accuracy_vs_bytes(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, title: str = "") -> Path | None:
    """Fig. 7 style: server (left) and client (right) accuracy against cumulative bytes, one line per run.

    Returns None (and writes nothing) when no run has byte counts. A panel no run measured is left out (the server
    model's, of runs that keep none), and where no run sent a byte the axis says so.
    """
    peak = max((float(r["bytes_cumulative"]) for recs in curves.values() for r in recs if "bytes_cumulative" in r), default=None)
    if peak is None:
        return None
    unit, scale = unit_for(peak)
    from chillfl.plots.figure import Figure, finish_figure, gap_marker, literal, mark_lone_points, nulls_as_nan, percent_axis  # lazy: matplotlib (the `plots` extra) costs ~0.5 s of start-up

    # a panel no run measured (the server model of runs that keep none: individual) is left out, not drawn empty
    panels = [(key, what) for key, what in PANELS if any(r.get(key) is not None for recs in curves.values() for r in recs)
              or any(stop_point(recs, key) for recs in curves.values())]
    if not panels:
        return None
    fig = Figure(figsize=(6 * len(panels), 4))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (key, what) in zip(axes, panels):
        for colour, (label, records) in enumerate(curves.items()):
            xs, ys = accuracy_vs_bytes(nulls_as_nan(records, key), key)  # a null breaks the line, as a NaN does
            if xs and max(xs) == 0:  # no communication at all (individual): its final accuracy as a level
                ax.axhline(ys[-1], linestyle="--", color="gray", label=literal(f"{label} (no communication)"))
            elif xs:  # a run keeps its colour in both panels, also where one before it has no local accuracy
                colour_of, style = variant_style(colour)  # and past ten runs a line style of its own
                measured = [int(r["round"]) for r in records if key in r]  # rounds skipped (eval.every > 1): a dot per evaluated one
                ax.plot([x / scale for x in xs], ys, color=colour_of, ls=style, label=literal(label), marker=gap_marker(measured))
            if (point := stop_point(records, key)) is not None and records[-1].get("bytes_cumulative") is not None:  # a stopped run's final point, apart
                ax.plot([float(records[-1]["bytes_cumulative"]) / scale], [point.value], ls="", marker=STOP_MARKER, ms=11,
                        color=variant_style(colour)[0], label=literal(stop_label(point.round, label)))
        ax.set(xlabel=f"cumulative communication ({unit})", ylabel="accuracy", title=what)
        if peak == 0:  # an x axis of 0 to 1 byte said nothing: say that none was sent
            ax.set(xlabel="cumulative communication: no bytes sent", xticks=[])
        percent_axis(ax)
        mark_lone_points(ax)
    return finish_figure(fig, axes, path, title, shared=True)  # one legend beside the panels: one in each covered the lines


def plot_accuracy_vs_bytes(records: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path | None:
    """One run's server and client accuracy against cumulative bytes (None when the records carry no bytes)."""
    return plot_compare_accuracy_vs_bytes({title or "run": records}, path, title)


BYTES = register_figure("accuracy_vs_bytes", FigureSpec("accuracy_vs_bytes.png", plot_accuracy_vs_bytes, "accuracy against cumulative bytes (SCARLET Fig. 7)"))
"""Drawn when the protocol declares ``bytes_figure`` and the records carry bytes."""

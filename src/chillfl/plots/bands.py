"""Curves over seeds: the mean per round with a shaded ± 1 std band (``compare --seeds``; :mod:`chillfl.metrics.spread`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.metrics.spread import SPREAD, seed_band
from chillfl.plots.figure import Figure, fit_title, gap_marker, literal, lone_spread, nulls_as_nan, percent_axis
from chillfl.plots.run import axis_label, finish_panels, no_finished_run, not_measured
from chillfl.plots.stop import STOP_MARKER, stop_label, stop_point
from chillfl.plots.styles import variant_style


def plot_band_curves(curves: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], path: str | Path, key: str = "global_acc", title: str = "") -> None:
    """Per variant: the mean over seeds (line) and ± 1 std over seeds (shaded; the HTML report's band), accuracy and loss panels."""
    fig = Figure(figsize=(12, 4))
    ax_acc, ax_loss = fig.subplots(1, 2)
    loss_key = key.replace("acc", "loss")
    for index, (label, runs) in enumerate(curves.items()):
        if not runs:
            no_finished_run(label, (ax_acc, ax_loss))
            continue
        colour, style = variant_style(index)  # the 11th variant in the 1st one's colour, dashed
        for ax, k in ((ax_acc, key), (ax_loss, loss_key)):
            # the band over the seeds that measured k in some round: a seed stopped before its first evaluated round has
            # its star alone, where it emptied the rounds common to all seeds and hid the others' curves
            banding = [records for records in runs if any(r.get(k) is not None for r in records)]
            rounds, mean, std = seed_band([nulls_as_nan(records, k) for records in banding], k)  # a null breaks the line, as a NaN does
            n = f"n={len(banding)}" + (f" of {len(runs)}" if len(banding) < len(runs) else "")
            # each stopped run's stop-round evaluation (summary.json), its own star, never in the mean (as the HTML report has it)
            points = [point for records in runs if (point := stop_point(records, k)) is not None]
            for point in points:
                ax.plot([point.round], [point.value], ls="", marker=STOP_MARKER, ms=9, color=colour, label=literal(stop_label(None, label)))
            if not rounds:  # finished, nothing of k measured (no global model: Individual): said, not an entry with no line
                if not points:
                    not_measured(f"{label} (n={len(runs)})", k, ax)
                continue
            (line,) = ax.plot(rounds, mean, label=literal(f"{label} ({n})"), color=colour, ls=style, marker=gap_marker(rounds))
            ax.fill_between(rounds, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], color=line.get_color(), alpha=0.2, linewidth=0)
            lone_spread(ax, rounds, mean, std, colour)  # a band of one round has no width: an error bar there
    banded = any(len(runs) > 1 for runs in curves.values())  # one seed each (a tuning grid at one seed): no band to name
    ax_acc.set(xlabel="round", ylabel=axis_label(key), title=f"Accuracy: mean over seeds, {SPREAD}" if banded else "Accuracy")
    ax_loss.set(xlabel="round", ylabel=axis_label(loss_key), title="Loss")
    if key.endswith("acc"):  # in percent, as differences.png and the HTML report give accuracy
        percent_axis(ax_acc)
    if title:  # the comparison's name over both panels, as :func:`~chillfl.plots.run.plot_curves` has it
        fit_title(fig, title)
    finish_panels(fig, (ax_acc, ax_loss), path)

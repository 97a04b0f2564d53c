"""PNG plots of result folders (matplotlib's object API on the Agg canvas, as :mod:`chillfl.plots.figure`: no pyplot figure manager shared by runs that draw at once, nothing to close, no display)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.extras import need

need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError

from chillfl.plots.figure import Figure, fit_title, gap_marker, legend_below, literal, log_scale, mark_lone_points, measured_series, percent_axis, save_png, shared_legend, spans_decades  # noqa: E402
from chillfl.plots.registry import FigureSpec, register_figure  # noqa: E402
from chillfl.plots.stop import STOP_MARKER, stop_label, stop_point  # noqa: E402
from chillfl.plots.styles import variant_style  # noqa: E402


AXIS_LABELS = {"global_acc": "accuracy: global model, test set", "local_acc": "accuracy: local models, own splits",
               "global_loss": "loss: global model, test set (T = 1)", "local_loss": "loss: local models, own splits"}
"""A comparison panel's y label by the record key it plots (the key itself for any other): ``global_acc`` says nothing to
a reader who has not read metrics.jsonl."""


def axis_label(key: str) -> str:
    """The y label of a panel plotting ``key`` (:data:`AXIS_LABELS`); a loss key's label says "loss", which
    :func:`finish_panels` reads to log-scale an exploding run."""
    return AXIS_LABELS.get(key, key)


def plot_run(records: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> None:
    """Accuracy (global and local) and loss (global test, local train) over rounds."""
    fig = Figure(figsize=(11, 4))
    ax_acc, ax_loss = fig.subplots(1, 2)
    stop_drawn: set[int] = set()  # the panels with a stop-round point: its long legend entry goes under them
    for key, label in (("global_acc", "global model, test set"), ("local_acc", "local models, own splits"), ("global_client_acc", "global model, client splits")):
        rounds, values = measured_series(records, key)  # a null breaks the line as a NaN does; a dot per round where rounds are skipped
        line = ax_acc.plot(rounds, values, label=label, marker=gap_marker(rounds)) if rounds else []
        if draw_stop_point(ax_acc, records, key, label, line[0].get_color() if line else None):
            stop_drawn.add(0)
    for key, label in (("global_loss", "global test loss (T=1)"), ("train_loss", "local train loss (at T)")):
        rounds, values = measured_series(records, key)
        line = ax_loss.plot(rounds, values, label=label, marker=gap_marker(rounds)) if rounds else []
        if draw_stop_point(ax_loss, records, key, label, line[0].get_color() if line else None):
            stop_drawn.add(1)
    ax_acc.set(xlabel="round", ylabel="accuracy", title="Accuracy")
    ax_loss.set(xlabel="round", ylabel="loss", title="Loss")
    percent_axis(ax_acc)
    log_scale_if_exploding(ax_loss)  # a first round's train loss of 5e7 flattened every later value onto 0
    for i, ax in enumerate((ax_acc, ax_loss)):
        integer_rounds(ax)
        ax.grid(alpha=0.3)
        if i in stop_drawn:  # inside, the stop point's entry ran past the figure's edge and covered the star (rev116b 3)
            legend_below(ax)
        else:
            ax.legend()
    if title:
        fit_title(fig, title)  # wrapped: a long comparison run's name ran past both edges
    fig.tight_layout()
    save_png(fig, path, dpi=110)


def draw_stop_point(ax: Any, records: Sequence[Mapping[str, Any]], key: str, what: str, colour: str | None) -> bool:
    """A stopped run's ``key`` measured at its stop round for its summary alone (:func:`~chillfl.plots.stop.stop_point`),
    as a star in its curve's ``colour`` with a legend entry of its own, unjoined to the line: the line is the rounds
    ``metrics.jsonl`` holds, and that point is not among them. Nothing where the records carry none; whether it drew one."""
    point = stop_point(records, key)
    if point is not None:
        ax.plot([point.round], [point.value], ls="", marker=STOP_MARKER, ms=11, color=colour, label=stop_label(point.round, what))
    return point is not None


def temperature_series(per_round: Sequence[tuple[int, Mapping[str, float]]], client: str) -> tuple[list[int], list[float]]:
    """Client ``client``'s temperature in each recorded round, NaN where it did not take part: matplotlib breaks the line
    there (a line joined across the rounds it sat out drew a temperature it never trained at)."""
    return [rnd for rnd, _ in per_round], [float(temps.get(client, math.nan)) for _, temps in per_round]


def plot_temperatures(records: Sequence[Mapping[str, Any]], path: str | Path) -> bool:
    """One line per client: its temperature over rounds. Returns False when there is nothing per-client."""
    per_round = [(r["round"], r["temperatures"]) for r in records if r.get("temperatures")]
    if not per_round:
        return False
    clients = sorted({c for _, temps in per_round for c in temps}, key=int)
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.subplots()
    drawn: list[float] = []
    for c in clients:
        rounds, temps_c = temperature_series(per_round, c)
        gaps = any(math.isnan(t) for t in temps_c)  # a dot per round it took part in: a round alone between gaps has no line
        ax.plot(rounds, temps_c, lw=1, marker="." if gaps else None, ms=3, label=f"client {c}" if len(clients) <= 10 else None)
        drawn += [t for t in temps_c if not math.isnan(t)]
    ax.set(xlabel="round", ylabel="temperature T", title=f"Per-client temperatures ({len(clients)} clients)")
    if spans_decades(drawn):  # FedChill's T from 0.05 to 1: a log axis; within a decade a linear one reads better
        log_scale(ax, "y")
    integer_rounds(ax)
    ax.grid(alpha=0.3)
    if len(clients) <= 10:  # beside the axes: inside, it covered the clients whose T it lies over
        fig.legend(fontsize=7, loc="outside right upper")
    save_png(fig, path, dpi=110)
    return True


def plot_curves(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, key: str = "global_acc", title: str = "") -> None:
    """One accuracy curve per variant (``compare``), plus the loss panel; ``title`` over both. A variant stopped early
    whose last record carries its stop-round evaluation (:func:`~chillfl.plots.stop.with_stop_evaluation`) gets its stop
    point, as :func:`plot_run` draws it."""
    fig = Figure(figsize=(12, 4))
    ax_acc, ax_loss = fig.subplots(1, 2)
    loss_key = key.replace("acc", "loss")
    for index, (label, records) in enumerate(curves.items()):
        if not records:
            no_finished_run(label, (ax_acc, ax_loss))
            continue
        colour, style = variant_style(index)  # the 11th variant in the 1st one's colour, dashed
        for ax, k in ((ax_acc, key), (ax_loss, loss_key)):  # under eval.every > 1 a dot on each evaluated round
            rounds, values = measured_series(records, k)
            point = stop_point(records, k)  # a stopped run's stop-round evaluation (summary.json), apart, as plot_run draws it
            if not rounds and point is None:  # finished, nothing of k measured (no global model: Individual): said, not an entry with no line
                not_measured(label, k, ax)
                continue
            if rounds:
                ax.plot(rounds, values, label=literal(label), color=colour, ls=style, marker=gap_marker(rounds))
            if point is not None:  # a star in the variant's colour, unjoined, its entry naming the variant (one for both panels)
                ax.plot([point.round], [point.value], ls="", marker=STOP_MARKER, ms=11, color=colour, label=literal(stop_label(point.round, label)))
    ax_acc.set(xlabel="round", ylabel=axis_label(key), title="Accuracy")
    ax_loss.set(xlabel="round", ylabel=axis_label(loss_key), title="Loss")
    if key.endswith("acc"):  # in percent, as differences.png and the HTML report give accuracy
        percent_axis(ax_acc)
    if title:  # the comparison's name over both panels: as the accuracy panel's title, it read as what that panel plots
        fit_title(fig, title)
    finish_panels(fig, (ax_acc, ax_loss), path)


def not_measured(label: str, key: str, ax: Any) -> None:
    """A legend entry without a line for a variant that finished but measured no ``key`` (a run without a global
    model has no global accuracy): its entry was a coloured line that drew nothing, with no word of why."""
    ax.plot([], [], " ", label=literal(f"{label}: no {axis_label(key).split(':')[0]} measured"))


def no_finished_run(label: str, axes: Sequence[Any]) -> None:
    """A legend entry without a line for a variant none of whose runs finished (diverged at every seed): its
    curve is missing for a reason the figure says, not silently."""
    for ax in axes:
        ax.plot([], [], " ", label=literal(f"{label}: no finished run"))


def integer_rounds(ax: Any) -> None:
    """Rounds are whole numbers: no 2.5 ticks on short runs. A line of one round (a 1-round run) gets a marker,
    since a line of one point draws nothing, and an axis spanning one round its one whole tick, not 0.945 ... 1.05."""
    from matplotlib.ticker import FixedLocator, MaxNLocator

    mark_lone_points(ax)
    lo, hi = ax.get_xlim()
    whole = list(range(math.ceil(lo), math.floor(hi) + 1))
    ax.xaxis.set_major_locator(FixedLocator(whole) if 0 < len(whole) <= 1 else MaxNLocator(integer=True))


def log_scale_if_exploding(ax: Any, factor: float = 10.0) -> None:
    """Log-scale the y axis when some line exceeds ``factor`` x the median of the lines' last values,
    so one diverging run does not flatten every other curve against the axis."""
    finals, peak = [], 0.0
    for line in ax.get_lines():
        ys = [float(y) for y in line.get_ydata() if math.isfinite(float(y))]
        if ys:
            finals.append(ys[-1])
            peak = max(peak, max(ys))
    if finals and (median := sorted(finals)[len(finals) // 2]) > 0 and peak > factor * median:
        ax.set_yscale("log")
        ax.set_title(f"{ax.get_title()} (log scale)")


def finish_panels(fig: Any, axes: Sequence[Any], path: str | Path) -> None:
    """Grid and whole-round ticks on every panel (loss panels log-scaled when one run explodes), one legend of the
    variants beside the panels (:func:`~chillfl.plots.figure.shared_legend`: a legend in each covered the curves of a
    few variants), then save."""
    for ax in axes:
        integer_rounds(ax)
        if "loss" in ax.get_ylabel():
            log_scale_if_exploding(ax)
        ax.grid(alpha=0.3)
    shared_legend(fig, axes)
    save_png(fig, path, dpi=110)


register_figure("accuracy_loss", FigureSpec("accuracy_loss.png", plot_run, "accuracy and loss over rounds"))
register_figure("temperatures", FigureSpec("temperatures.png", lambda records, path, title: plot_temperatures(records, path), "each client's temperature over rounds"))

"""A private run's figure: accuracy against the privacy budget spent (the privacy-utility curve) and epsilon over rounds.

Read from the round records: ``global_acc`` and ``epsilon``, the budget spent so far, which every private run
records (the worst-off privacy unit's, at ``privacy.delta``: :mod:`chillfl.privacy.protocol`). The run's config adds
what the records do not hold: the mechanism and delta for the title, and ``privacy.target_epsilon`` as a dashed line.
Every mechanism declares this figure unless its spec says otherwise (:attr:`chillfl.privacy.spec.MechanismSpec.figures`).

Choices
-------
* Left: one point per round that has both a global accuracy and an epsilon (a round without an evaluation has
  none), joined in round order: the budget spent only grows, so the line runs left to right as the run goes on. A
  round that recorded either as null (an infinite epsilon) breaks the line there, as in the right panel.
* Right: epsilon of every round that has one, and the target (when ``target_epsilon`` > 0) dashed: sigma was
  planned so that the planned rounds spend it, so the curve ends at or below the line (below where fewer clients
  took part than planned).
* A soft-label run also records ``epsilon_upload`` (every row a client released, composed: the client-level figure):
  both panels then draw it beside ``epsilon`` (the bound for any one row), each labelled with what it bounds, and the
  epsilon axes turn logarithmic where the two differ by more than a factor of 10, so that neither is flattened.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.extras import need

need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError

from chillfl.config import RunConfig  # noqa: E402
from chillfl.plots.figure import Figure, finish_figure, log_scale, mark_lone_points, measured_series, nulls_as_nan, percent_axis, spans_decades  # noqa: E402
from chillfl.plots.registry import FigureSpec, register_figure  # noqa: E402
from chillfl.plots.run import integer_rounds  # noqa: E402
from chillfl.plots.stop import STOP_MARKER, stop_label, stop_point  # noqa: E402


EPSILONS: tuple[tuple[str, str], ...] = (("epsilon", "epsilon spent"), ("epsilon_upload", "epsilon_upload: a client's whole upload"))
"""The budgets a run may record, each with its label (:mod:`chillfl.privacy.protocol`); ``epsilon`` is relabelled where
``epsilon_upload`` is beside it, since under soft-label sharing it bounds one row only."""


def accuracy_vs_epsilon(records: Sequence[Mapping[str, Any]], key: str = "global_acc", epsilon: str = "epsilon") -> tuple[list[float], list[float]]:
    """(epsilons, accuracies) of the rounds that recorded both, in round order."""
    pts = [(float(r[epsilon]), float(r[key])) for r in records if r.get(epsilon) is not None and r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def drawn_accuracy_vs_epsilon(records: Sequence[Mapping[str, Any]], key: str = "global_acc", epsilon: str = "epsilon") -> tuple[list[float], list[float]]:
    """:func:`accuracy_vs_epsilon` as the left panel draws it: a round that recorded either as null (an infinite epsilon,
    an accuracy not measured) is a NaN point, so that the line breaks there (:func:`~chillfl.plots.figure.nulls_as_nan`);
    left out, the rounds either side were joined by a straight line through a value never measured."""
    return accuracy_vs_epsilon(nulls_as_nan(nulls_as_nan(records, epsilon), key), key, epsilon)


def epsilon_curves(records: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(record key, label) of each budget the records hold, ``epsilon`` first; ``epsilon`` says it bounds one row where a
    client's whole upload is recorded too (soft-label sharing)."""
    keys = [(key, label) for key, label in EPSILONS if any(r.get(key) is not None for r in records)]
    if len(keys) > 1:
        keys[0] = ("epsilon", "epsilon: any one row")
    return keys


def plot_privacy(records: Sequence[Mapping[str, Any]], path: str | Path, title: str = "", target_epsilon: float = 0.0) -> bool:
    """Global accuracy against epsilon spent (left) and epsilon over rounds with the target dashed (right);
    False (nothing written) when the records hold no epsilon."""
    curves = epsilon_curves(records)
    if not measured_series(records, "epsilon")[0]:
        return False
    fig = Figure(figsize=(11, 4))
    ax_acc, ax_eps = fig.subplots(1, 2)
    both = len(curves) > 1
    drawn: list[float] = []
    for (key, label), color in zip(curves, ("C0", "C2")):  # one colour a budget in both panels where there are two
        spent, acc = drawn_accuracy_vs_epsilon(records, epsilon=key)
        if any(math.isfinite(x) and math.isfinite(y) for x, y in zip(spent, acc)):
            ax_acc.plot(spent, acc, marker=".", color=color, label=f"against {label}" if both else "global model, test set")
        spent_then = records[-1].get(key) if records else None
        if (point := stop_point(records, "global_acc")) is not None and spent_then is not None:  # a stopped run's final point, apart
            ax_acc.plot([float(spent_then)], [point.value], ls="", marker=STOP_MARKER, ms=11, color=color,
                        label=stop_label(point.round, f"against {label}" if both else "global model"))
        rounds, eps = measured_series(records, key)  # a null (an infinite epsilon) breaks the line, as a NaN does
        ax_eps.plot(rounds, eps, marker=".", color=color if both else "C1", label=label)
        drawn += [e for e in eps if math.isfinite(e)]
    ax_acc.set(xlabel="epsilon spent", ylabel="accuracy" + (" (global model, test set)" if both else ""), title="Accuracy against privacy spent")
    percent_axis(ax_acc)
    mark_lone_points(ax_acc)
    if both and spans_decades(drawn + ([target_epsilon] if target_epsilon > 0 else [])):
        log_scale(ax_acc, "x")
        log_scale(ax_eps, "y")
    if target_epsilon > 0:
        ax_eps.axhline(target_epsilon, ls="--", color="gray", label=f"target epsilon = {target_epsilon:g}")
    ax_eps.set(xlabel="round", ylabel="epsilon", title="Privacy spent over rounds")
    integer_rounds(ax_eps)
    finish_figure(fig, (ax_acc, ax_eps), path, title)
    return True


def plot_privacy_run(records: Sequence[Mapping[str, Any]], path: str | Path, config: RunConfig) -> bool:
    """:func:`plot_privacy` of a run: titled with its name, mechanism and delta, with its target epsilon."""
    privacy = config.privacy
    return plot_privacy(records, path, f"{config.name}: {privacy.mechanism}, delta = {privacy.delta:g}", privacy.target_epsilon)


PRIVACY = register_figure("privacy", FigureSpec("privacy.png", plot_privacy, "accuracy against epsilon spent, and epsilon over rounds", draw_run=plot_privacy_run))
"""Declared by every mechanism's spec unless it says otherwise (``figures``)."""

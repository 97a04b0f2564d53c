"""A private run's figure: accuracy against the privacy budget spent (the privacy-utility curve) and epsilon over rounds.

Read from the round records: ``global_acc`` and ``epsilon``, the budget spent so far, which every private run
records (the worst-off privacy unit's, at ``privacy.delta``: :mod:`chillfl.privacy.protocol`). The run's config adds
what the records do not hold: the mechanism and delta for the title, and ``privacy.target_epsilon`` as a dashed line.
Every mechanism declares this figure unless its spec says otherwise (:attr:`chillfl.privacy.spec.MechanismSpec.figures`).

Choices
-------
* Left: one point per round that has both a global accuracy and an epsilon (a round without an evaluation has
  none, nor one whose epsilon is infinite, recorded as null), joined in round order: the budget spent only grows,
  so the line runs left to right as the run goes on.
* Right: epsilon of every round that has one, and the target (when ``target_epsilon`` > 0) dashed: sigma was
  planned so that the planned rounds spend it, so the curve ends at or below the line (below where fewer clients
  took part than planned).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.extras import need

need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError

from chillfl.config import RunConfig  # noqa: E402
from chillfl.plots.figure import Figure, finish_figure, mark_lone_points  # noqa: E402
from chillfl.plots.registry import FigureSpec, register_figure  # noqa: E402
from chillfl.plots.run import integer_rounds  # noqa: E402
from chillfl.storage.results import series  # noqa: E402


def accuracy_vs_epsilon(records: Sequence[Mapping[str, Any]], key: str = "global_acc") -> tuple[list[float], list[float]]:
    """(epsilons, accuracies) of the rounds that recorded both, in round order."""
    pts = [(float(r["epsilon"]), float(r[key])) for r in records if r.get("epsilon") is not None and r.get(key) is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_privacy(records: Sequence[Mapping[str, Any]], path: str | Path, title: str = "", target_epsilon: float = 0.0) -> bool:
    """Global accuracy against epsilon spent (left) and epsilon over rounds with the target dashed (right);
    False (nothing written) when the records hold no epsilon."""
    eps_rounds, eps = series(records, "epsilon")
    if not eps_rounds:
        return False
    fig = Figure(figsize=(11, 4))
    ax_acc, ax_eps = fig.subplots(1, 2)
    spent, acc = accuracy_vs_epsilon(records)
    if spent:
        ax_acc.plot(spent, acc, marker=".", label="global model, test set")
    ax_acc.set(xlabel="epsilon spent", ylabel="accuracy", title="Accuracy against privacy spent")
    mark_lone_points(ax_acc)
    ax_eps.plot(eps_rounds, eps, marker=".", color="C1", label="epsilon spent")
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

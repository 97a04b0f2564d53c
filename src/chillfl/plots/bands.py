"""Curves over seeds: the mean per round with a shaded min-max band (``compare --seeds``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.storage.results import series
from chillfl.plots.run import finish_panels, plt


def band(runs: Sequence[Sequence[Mapping[str, Any]]], key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """(rounds, mean, min, max) of ``key`` over the runs, on the rounds every run measured."""
    per_run = [dict(zip(*series(records, key))) for records in runs]
    rounds = sorted(set.intersection(*(set(p) for p in per_run))) if per_run else []
    mean = [sum(p[r] for p in per_run) / len(per_run) for r in rounds]
    low = [min(p[r] for p in per_run) for r in rounds]
    high = [max(p[r] for p in per_run) for r in rounds]
    return rounds, mean, low, high


def plot_band_curves(curves: Mapping[str, Sequence[Sequence[Mapping[str, Any]]]], path: str | Path, key: str = "global_acc", title: str = "") -> None:
    """Per variant: the mean over seeds (line) and the min-max over seeds (shaded), accuracy and loss panels."""
    fig, (ax_acc, ax_loss) = plt.subplots(1, 2, figsize=(11, 4))
    loss_key = key.replace("acc", "loss")
    for label, runs in curves.items():
        if not runs:
            continue
        for ax, k in ((ax_acc, key), (ax_loss, loss_key)):
            rounds, mean, low, high = band(runs, k)
            (line,) = ax.plot(rounds, mean, label=f"{label} (n={len(runs)})")
            ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax_acc.set(xlabel="round", ylabel=key, title=(title or "Accuracy") + ": mean over seeds, band = min-max")
    ax_loss.set(xlabel="round", ylabel=loss_key, title="Loss")
    finish_panels(fig, (ax_acc, ax_loss), path)

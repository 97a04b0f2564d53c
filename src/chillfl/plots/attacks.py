"""An attacked run's figure: global accuracy and the attack's success over rounds, on one 0-1 axis.

Read from the round records: ``global_acc`` and ``attack_success_rate``, the global model's accuracy on the
attack's probe set (e.g. triggered inputs labelled with a backdoor's target), which a run records each round where
the attack has a ``probe`` and the server keeps a model (:mod:`chillfl.attacks.protocol`). Both are shares (of the
test set, of the probe set), hence one axis: how the backdoor takes hold beside what the task keeps. The run's
config adds the attack's kind for the title. Every attack declares this figure unless its spec says otherwise
(:attr:`chillfl.attacks.spec.AttackSpec.figures`); a run whose records hold no success rate gets none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from chillfl.extras import need

need("matplotlib", "plots", "plots")  # one MissingExtra line instead of an ImportError

from chillfl.config import RunConfig  # noqa: E402
from chillfl.plots.figure import Figure, finish_figure, measured_series, percent_axis  # noqa: E402
from chillfl.plots.registry import FigureSpec, register_figure  # noqa: E402
from chillfl.plots.run import draw_stop_point, integer_rounds  # noqa: E402


def plot_attack(records: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> bool:
    """Global accuracy and attack success rate over rounds; False (nothing written) when the records hold no success rate."""
    asr_rounds, asr = measured_series(records, "attack_success_rate")  # a null breaks the line, as a NaN does
    if not asr_rounds:
        return False
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    acc_rounds, acc = measured_series(records, "global_acc")
    if acc_rounds:
        ax.plot(acc_rounds, acc, marker=".", color="C0", label="global accuracy, test set")
    draw_stop_point(ax, records, "global_acc", "global accuracy", "C0")  # a stopped run's final point, apart from the curve
    ax.plot(asr_rounds, asr, marker=".", color="C3", label="attack success rate, probe set")
    draw_stop_point(ax, records, "attack_success_rate", "attack success rate", "C3")
    ax.set(xlabel="round", ylabel="share of the set", ylim=(-0.02, 1.02), title="Accuracy and attack success")
    percent_axis(ax)
    integer_rounds(ax)
    finish_figure(fig, (ax,), path, title, shared=True)  # the legend beside the axes: both curves span the 0-1 axis, inside it hid them
    return True


def plot_attack_run(records: Sequence[Mapping[str, Any]], path: str | Path, config: RunConfig) -> bool:
    """:func:`plot_attack` of a run: titled with its name and the attack's kind."""
    return plot_attack(records, path, f"{config.name}: attack {config.attack.kind}")


ATTACK = register_figure("attack", FigureSpec("attack.png", plot_attack, "global accuracy and attack success rate over rounds", draw_run=plot_attack_run))
"""Declared by every attack's spec unless it says otherwise (``figures``); drawn where the records hold ``attack_success_rate``."""

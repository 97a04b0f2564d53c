"""The aggregation figures (FLex&Chill Figs. 9 and 10) put their legend inside the axes, over the points or bars of
whichever run stood under it, and rotated each run's full label, which ran into its neighbours and squashed the panel.
The legend is under the axes now, and a long label is wrapped to its run's width, level."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("matplotlib")

LABELS = ["fedavg-lr0.05-T0.05-momentum0.9-s0", "fedprox-client.lr0.05-objective.proximal_mu0.01-partition.alpha0.1-s0", "scaffold"]


def _result() -> dict[str, Any]:
    clients = [{"delta": 0.1 * (i - 2), "participating": i % 2 == 0} for i in range(5)]
    return {"runs": {label: {"clients": clients, "before": 1.0, "after": 0.5 + i / 10} for i, label in enumerate(LABELS)}}


def _drawn(plot: Callable[[dict[str, Any], Path], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    import chillfl.plots.figure

    saved: list[Any] = []
    real = chillfl.plots.figure.save_figure
    monkeypatch.setattr(chillfl.plots.figure, "save_figure", lambda fig, path, **kw: (saved.append(fig), real(fig, path, **kw))[1])
    plot(_result(), tmp_path / "f.png")
    (fig,) = saved
    return fig


@pytest.mark.parametrize("name", ["plot_accuracy_change", "plot_entropy_change"])
def test_the_legend_is_under_the_axes_and_long_labels_are_wrapped(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.analysis.aggregation as aggregation

    fig = _drawn(getattr(aggregation, name), tmp_path, monkeypatch)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend()
    assert legend is not None
    assert legend.get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0  # wholly under the axes, none of it on the data
    assert legend.get_window_extent(renderer).y1 < ax.xaxis.get_tightbbox(renderer).y0  # and under every line of the labels (a 5-line one)
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[-1] == "scaffold" and all("\n" in t for t in ticks[:2]) and ticks[1].count("\n") >= 3
    assert [t.replace("\n", "") for t in ticks] == LABELS  # wrapped, not cut
    assert all(line.endswith("-") or line == t.split("\n")[-1] for t in ticks for line in t.split("\n"))  # at hyphens: never "lr0.0" over "5"
    assert all(t.get_rotation() == 0 for t in ax.get_xticklabels())

"""The temperature sweep's scatter (report figvis, item 9).

* scatter.png coloured T with ``coolwarm`` on a log scale: the grid's middle T (0.25 of 0.05-1) sat at its white centre,
  and those dots vanished on the white axes;
* its trend legend quoted the ratio score's r whatever h was plotted (``temperature.measure = size``: r of the other sign).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("scipy")

from matplotlib.figure import Figure  # noqa: E402


def sweep() -> object:
    """Three clients, T in 0.05, 0.25, 1 (accuracies made up); the plotted h rises with the best T (r of the points ~0.98),
    while the table's ratio row, of another score, says r = -0.5."""
    from chillfl.analysis.temperature_sweep import SweepResult

    acc = np.array([[0.9, 0.6, 0.5], [0.5, 0.9, 0.6], [0.4, 0.5, 0.9]])
    rows = [{"measure": "ratio", "r": -0.5, "p": 0.6, "n": 3}, {"measure": "size", "r": -0.98, "p": 0.1, "n": 3}]
    return SweepResult([0.05, 0.25, 1.0], acc, acc, np.ones((3, 10)), np.array([0.1, 0.3, 0.8]), np.array([0.05, 0.25, 1.0]),
                       np.array([0.9, 0.9, 0.9]), np.array([0.4, 0.3, 0.0]), {"best_temperature": rows})  # type: ignore[arg-type]


def test_no_temperature_is_drawn_white_on_the_scatter(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.analysis.temperature_sweep import plot_scatter

    plot_scatter(sweep(), tmp_path / "scatter.png")  # type: ignore[arg-type]
    points = drawn[0].axes[0].collections[0]
    for t in (0.05, 0.1, 0.2, 0.25, 0.3, 0.5, 1.0):
        red, green, blue, _ = points.cmap(points.norm(t))
        assert min(red, green, blue) < 0.8, f"T = {t} is drawn near-white"


def test_the_trend_legend_quotes_the_r_of_the_points_it_draws(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.analysis.temperature_sweep import plot_scatter

    plot_scatter(sweep(), tmp_path / "scatter.png")  # type: ignore[arg-type]
    (legend,) = [ax.get_legend() for ax in drawn[0].axes if ax.get_title().startswith("best temperature")]
    r = np.corrcoef([0.1, 0.3, 0.8], [0.05, 0.25, 1.0])[0, 1]
    (text,) = [t.get_text() for t in legend.get_texts()]
    assert f"{r:.3f}" in text and "ratio" not in text, text

"""A stopped run's ``accuracy_loss.png``: the stop point's legend entry (a long label) goes under its panel, inside the
figure, and off the star (rev116b 3: inside the panel it ran past the figure's left edge and covered the star)."""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl.plots.run as run_plots
from chillfl.plots.stop import STOP_EVALUATION
from test_stopround_figures import captured


def test_the_stop_points_legend_is_under_its_panel_and_inside_the_figure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    records = [{"round": 1, "train_loss": 2.0, "global_acc": 0.3, "global_loss": 1.5},
               {"round": 2, "train_loss": 1.8, STOP_EVALUATION: {"global_acc": 0.6, "global_loss": 1.1}}]
    figures = captured(monkeypatch, run_plots, "save_png")
    run_plots.plot_run(records, tmp_path / "a.png")
    (fig,) = figures
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # the figure as save_png draws it
    whole = fig.bbox
    for ax in fig.axes:
        box, panel = ax.get_legend().get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.y1 <= panel.y0  # under the panel: off its points (the star at the top edge of the loss panel)
        assert whole.x0 <= box.x0 and box.x1 <= whole.x1  # nothing cut at the figure's edges

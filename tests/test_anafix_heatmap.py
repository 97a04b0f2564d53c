"""temperature-sweep's note that h is FedChill's default score (a policy other than ``fedchill``) is on heatmap.png
too: its rows' h and their order are that score. It was under scatter.png only. The note is wrapped to the
figure's width (a heat map of two temperatures is ~5 inches wide) and sits below the axes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

NOTE = ("h is Eq. 6 at FedChill's defaults (measure ratio, normalisation max, uniform p_g): "
        "temperature.policy 'fixed' has no heterogeneity score of its own")


def _drawn(monkeypatch: pytest.MonkeyPatch, plot: Any, result: Any, path: Path) -> Any:
    """The figure ``plot`` saves (matplotlib's Figure.savefig caught)."""
    from matplotlib.figure import Figure

    figures: list[Any] = []
    save = Figure.savefig

    def caught(self: Any, *args: Any, **kwargs: Any) -> None:
        figures.append(self)
        save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", caught)
    plot(result, path, title="anafix")
    assert len(figures) == 1 and path.is_file()
    return figures[0]


def _result(temperatures: list[float], note: str | None) -> Any:
    from chillfl.analysis.temperature_sweep import SweepResult

    m = len(temperatures)
    acc = np.linspace(0.3, 0.9, 3 * m).reshape(3, m)
    return SweepResult(temperatures, acc, acc, np.ones((3, 4)), np.array([0.2, 0.5, 0.8]), np.full(3, temperatures[-1]), acc.max(1), np.zeros(3),
                       score_note=note)


@pytest.mark.parametrize("plot_name", ["plot_heatmap", "plot_scatter"])
@pytest.mark.parametrize("temperatures", [[0.5, 1.0], [0.05, 0.1, 0.25, 0.5, 1.0]])
def test_both_figures_carry_the_score_note_inside_the_figure_below_the_axes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plot_name: str,
                                                                            temperatures: list[float]) -> None:
    import chillfl.analysis.temperature_sweep as sweep

    plot = getattr(sweep, plot_name)
    fig = _drawn(monkeypatch, plot, _result(temperatures, NOTE), tmp_path / "fig.png")
    notes = [t for t in fig.texts if " ".join(t.get_text().split()) == NOTE]
    assert len(notes) == 1, [t.get_text() for t in fig.texts]
    renderer = fig.canvas.get_renderer()
    box = notes[0].get_window_extent(renderer)
    assert box.x0 >= 0 and box.x1 <= fig.bbox.x1 + 1 and box.y0 >= 0  # wrapped: inside the figure, however narrow
    assert all(box.y1 <= ax.get_tightbbox(renderer).y0 + 1 for ax in fig.axes)  # below the axes and their x labels, not over them


def test_the_heatmap_has_no_note_where_the_config_chose_its_score(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chillfl.analysis.temperature_sweep import plot_heatmap

    fig = _drawn(monkeypatch, plot_heatmap, _result([0.5, 1.0], None), tmp_path / "plain.png")
    assert [t for t in fig.texts if t is not fig._suptitle] == []  # the title (fit_title, a figure text) and nothing else

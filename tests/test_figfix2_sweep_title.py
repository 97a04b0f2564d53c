"""A long run name over the temperature sweep's heat map (report figvis, item 6): as the axes' own title it ran past
both edges of heatmap.png; now :func:`~chillfl.plots.figure.fit_title` wraps it over the figure."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("scipy")

from matplotlib.figure import Figure  # noqa: E402

from test_figfix2_sweep import sweep  # noqa: E402


def test_a_long_run_name_over_the_sweep_heat_map_is_wrapped_inside_the_image(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.analysis.temperature_sweep import plot_heatmap

    name = "fedchill-fig1-digits-fifty-clients-alpha-0.5-long-experiment-name"
    plot_heatmap(sweep(), tmp_path / "heatmap.png", title=name)  # type: ignore[arg-type]
    fig = drawn[0]
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    titles = [t for t in (fig._suptitle, *(ax.title for ax in fig.axes)) if t is not None and name[:20] in t.get_text()]
    assert titles, "the run's name is in no title"
    for text in titles:
        box = text.get_window_extent(renderer)
        assert box.x0 >= 0 and box.x1 <= fig.bbox.width, (box, fig.bbox.width)

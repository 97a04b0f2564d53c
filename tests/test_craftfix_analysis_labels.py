"""A ``$`` in a run name is drawn as written by the analysis figures and the partition heat map's title too (the report's
and comparison's figures were mended first: test_craftfix_labels.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chillfl.plots.figure import Figure


def test_the_heat_map_title_wraps_a_dollar_name_without_mathtext() -> None:
    from chillfl.data.show import fit_title

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = Figure(figsize=(3, 2))
    FigureCanvasAgg(fig)
    fig.add_subplot()
    name = "lr_$a_b_c$ " * 8  # long enough to wrap
    fit_title(fig, name)
    fig.canvas.draw()  # mathtext would raise here on 'Double subscript'
    assert r"\$" in fig.get_suptitle() and "$a" not in fig.get_suptitle().replace(r"\$", "")


def test_the_soft_label_curves_draw_a_dollar_label(tmp_path: Path) -> None:
    from chillfl.analysis.softlabels import _plot_curves

    out = _plot_curves([1.0, 2.0], {r"$\frac{a$ b": np.array([0.1, 0.2])}, "T", tmp_path / "curves.png", logx=False)
    assert Path(out).is_file()

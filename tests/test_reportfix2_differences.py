"""``differences.png`` at 2 seeds: the mean's diamond must not hide the seeds' dots (it was filled and drawn on top of
them at the same x). Read from the drawn artists, not pixels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure

import chillfl.plots.figure as figure_module
from chillfl.plots.differences import plot_differences


def _stat(per_seed: list[float], low: float, high: float) -> dict[str, Any]:
    return {"n": len(per_seed), "mean": sum(per_seed) / len(per_seed), "std": 0.0, "ci_low": low, "ci_high": high, "per_seed": per_seed}


ROWS = [{"variant": "base", "delta_acc": _stat([0.0, 0.0], 0.0, 0.0)}, {"variant": "A", "delta_acc": _stat([0.01, 0.012], 0.005, 0.017)}]


def drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Figure:
    """The figure :func:`plot_differences` saves."""
    saved: list[Figure] = []
    real = figure_module.save_png
    monkeypatch.setattr(figure_module, "save_png", lambda fig, path, dpi=100: (saved.append(fig), real(fig, path, dpi))[1])
    assert plot_differences(ROWS, "base", tmp_path / "differences.png")
    return saved[0]


def test_seed_dots_are_drawn_above_a_hollow_mean_diamond(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ax = drawn(tmp_path, monkeypatch).axes[0]
    points = [c for c in ax.collections if isinstance(c, PathCollection)]
    dots = next(c for c in points if len(c.get_offsets()) == 2)
    diamond = next(c for c in points if len(c.get_offsets()) == 1)
    # what is plotted is unchanged: the seeds at 1.0 and 1.2 points, the mean at 1.1, on the variant's row
    assert sorted(float(x) for x, _ in dots.get_offsets()) == pytest.approx([1.0, 1.2])
    assert float(diamond.get_offsets()[0][0]) == pytest.approx(1.1)
    assert dots.get_zorder() > diamond.get_zorder()  # the dots above the mean's marker
    assert all(face[3] == 0.0 for face in diamond.get_facecolors())  # hollow: a dot under it would show through
    assert len(diamond.get_edgecolors()) and diamond.get_edgecolors()[0][3] > 0  # its colour (the CI's side) is on its edge

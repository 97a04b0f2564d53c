"""The reliability diagram's "share of samples per bin" is drawn over each bin: it was a step between the bins' mean
confidences (a vertical bracket at 15 bins, nothing at all with every sample in one bin, a share across empty bins)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("matplotlib")


def _run(count: list[int], confidence: list[float], accuracy: list[float], binning: str = "width") -> dict[str, Any]:
    bins = len(count)
    edges = [i / bins for i in range(bins + 1)]
    return {"bins": bins, "binning": binning, "temperature": 1.0, "ece": 0.1, "nll": 1.0, "brier": 0.5,
            "reliability": {"edges": edges, "count": count, "confidence": confidence, "accuracy": accuracy}}


def _share_axes(result: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The share's axes of the figure ``chillfl analyze calibration`` saves (taken where it is saved)."""
    import chillfl.plots.figure
    from chillfl.analysis.calibration import plot_reliability

    saved: list[Any] = []
    monkeypatch.setattr(chillfl.plots.figure, "save_figure", lambda fig, path, dpi=100, format=None: saved.append(fig))
    plot_reliability(result, tmp_path / "reliability.png")
    (fig,) = saved
    (panel, share) = fig.axes  # one run: its panel and the share's twin axes
    assert share.get_shared_x_axes().joined(panel, share)
    return share


def _stairs(share: Any) -> tuple[list[float], list[float]]:
    from matplotlib.patches import StepPatch

    (stairs,) = [p for p in share.patches if isinstance(p, StepPatch)]
    values, edges, _ = stairs.get_data()
    return [float(v) for v in values], [float(e) for e in edges]


def test_every_sample_in_one_of_three_bins_draws_that_bins_share_over_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """All samples in [0, 1/3): nothing was drawn (a step of one point)."""
    values, edges = _stairs(_share_axes(monkeypatch=monkeypatch, tmp_path=tmp_path, result={"runs": {"plain": _run([323, 0, 0], [0.2, 0.0, 0.0], [0.1, 0.0, 0.0])}}))
    assert values == [1.0, 0.0, 0.0]
    assert edges == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


def test_an_empty_bin_between_two_filled_ones_is_at_zero_and_each_share_spans_its_bin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Counts 1 and 3 in bins [0.2, 0.4) and [0.6, 0.8): the step was held across the empty bin between them."""
    result = {"runs": {"r": _run([0, 1, 0, 3, 0], [0.0, 0.3, 0.0, 0.7, 0.0], [0.0, 1.0, 0.0, 0.5, 0.0])}}
    values, edges = _stairs(_share_axes(result, monkeypatch, tmp_path))
    assert values == [0.0, 0.25, 0.0, 0.75, 0.0]
    assert edges == pytest.approx([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])


def test_equal_mass_bins_draw_each_share_over_its_bar(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Mass bins' bars stand at their mean confidence +- 0.02: each share is a segment over its bar."""
    from matplotlib.collections import LineCollection

    share = _share_axes(monkeypatch=monkeypatch, tmp_path=tmp_path, result={"runs": {"r": _run([2, 2], [0.4, 0.8], [0.5, 1.0], binning="mass")}})
    (lines,) = [c for c in share.collections if isinstance(c, LineCollection)]
    segments = [np.asarray(s).ravel().tolist() for s in lines.get_segments()]  # x0, y0, x1, y1
    assert len(segments) == 2
    assert segments[0] == pytest.approx([0.38, 0.5, 0.42, 0.5]) and segments[1] == pytest.approx([0.78, 0.5, 0.82, 0.5])

"""differences.png read as an image (report figvis, item 5), checked on the drawn objects: a long baseline's name in
both panels' x labels ran into each other, and a local-accuracy bar clipped to +-100 points was not marked (the mark
was on the row label, which the panels share, taken from the global panel)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402

from test_figfix3_figures import overlaps  # noqa: E402


def stat(mean: float, low: float, high: float) -> dict[str, Any]:
    return {"mean": mean, "ci_low": low, "ci_high": high, "n": 2, "per_seed": [mean - 0.01, mean + 0.01], "range": [-1, 1]}


def test_differences_wraps_a_long_baseline_and_marks_a_clipped_local_bar(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.metrics.stats import CLIPPED
    from chillfl.plots.differences import plot_differences

    baseline = "FedAvg with a very long baseline label (lr = 0.01, local_epochs = 5, momentum = 0.9, batch = 64)"
    rows = [{"variant": baseline},
            {"variant": "FedProx", "delta_acc": stat(0.01, -0.02, 0.04), "delta_local_acc": stat(0.3, -0.2, 1.4)},
            {"variant": "Ditto", "delta_acc": stat(-0.03, -0.05, -0.01), "delta_local_acc": stat(0.05, 0.01, 0.09)}]
    assert plot_differences(rows, baseline, tmp_path / "differences.png", local=True)
    (fig,) = drawn
    ax_global, ax_local = fig.axes
    assert not overlaps(ax_global.xaxis.label, ax_local.xaxis.label)  # side by side, they ran into each other
    assert [t.get_text() for t in ax_local.texts] == [CLIPPED]  # at the bar's clipped end, in the local panel itself
    assert ax_local.texts[0].xy[0] == pytest.approx(100.0) and not ax_global.texts
    assert [t.get_text() for t in ax_global.get_yticklabels()] == ["Ditto", f"FedProx {CLIPPED}"]  # the shared label says so

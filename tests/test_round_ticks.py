"""Every figure with a round axis labels whole rounds only (issue 25: a 3-round run showed ticks at 1.5, 2.5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")


def test_every_round_axis_has_integer_ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    from chillfl.config import RunConfig
    from chillfl.plots.bands import plot_band_curves
    from chillfl.report.html import Group, Run, curves_figure
    from chillfl.plots.pa3fed import plot_clp, plot_compare_clp
    from chillfl.plots.run import plot_curves, plot_run, plot_temperatures

    seen: list[tuple[str, list[float]]] = []
    save = Figure.savefig

    def spy(self: Figure, *args: Any, **kwargs: Any) -> Any:
        for ax in self.axes:
            if "round" in ax.get_xlabel():
                lo, hi = ax.get_xlim()
                seen.append((ax.get_title(), [float(t) for t in ax.get_xticks() if lo <= t <= hi]))
        return save(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", spy)
    # 3 rounds: matplotlib's default locator puts ticks at 1.0, 1.25, 1.5, ... on such an axis
    records = [{"round": r, "global_acc": 0.1 * r, "global_loss": 2.0 / r, "train_loss": 1.0 / r, "temperatures": {"0": 0.5, "1": 1.0},
                "agg_fgn": 0.1 * r, "agg_clp": r == 2, "agg_adapted": True} for r in (1, 2, 3)]
    run = Run(tmp_path, RunConfig(), records, {})
    curves_figure([Group("a", [run])], (("global_acc", "accuracy"), ("global_loss", "loss")))
    plot_run(records, tmp_path / "run.png")
    plot_temperatures(records, tmp_path / "t.png")
    plot_curves({"a": records}, tmp_path / "curves.png")
    plot_band_curves({"a": [records, records]}, tmp_path / "band.png")
    assert plot_clp(records, tmp_path / "clp.png") and plot_compare_clp({"a": records}, tmp_path / "clp2.png")
    assert len(seen) == 12  # every panel above with a round axis: 2 + 2 + 1 + 2 + 2 + 2 + 1
    fractional = [(title, ticks) for title, ticks in seen if not ticks or any(not t.is_integer() for t in ticks)]
    assert fractional == []

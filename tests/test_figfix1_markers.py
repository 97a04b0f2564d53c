"""figvis item 3 (the HTML report's curves): a dot at every measured round where a series skips rounds, so that a line
from round 3 to 6 does not read as values measured at 4 and 5; a series of every round stays a plain line."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("matplotlib")


def test_report_curves_mark_the_rounds_of_a_series_that_skips_some(monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.report.html as page
    from chillfl.report.html import Group, Run, curves_figure

    figures: list[Any] = []
    monkeypatch.setattr(page, "_png", lambda fig: figures.append(fig) or "")
    every3 = [{"round": r, "global_acc": 0.1 * r} for r in (3, 6, 7)]
    every = [{"round": r, "global_acc": 0.1 * r} for r in range(1, 8)]
    broken = [{"round": r, "global_acc": float("nan") if r in (2, 4) else 0.1 * r} for r in range(1, 6)]
    groups = [Group(name, [Run(None, None, records, {})]) for name, records in  # type: ignore[arg-type]
              (("every3", every3), ("every", every), ("broken", broken))]
    curves_figure(groups, (("global_acc", "g"),))
    (ax,) = figures[0].axes
    markers = {line.get_label(): line.get_marker() for line in ax.get_lines()}
    assert markers["every3 (n=1)"] == "." and markers["broken (n=1)"] == "."
    assert markers["every (n=1)"] in ("None", None, "")

"""``differences.png``: the points of the forest plot are the table's paired differences, in points, on the right side of 0.

Rows are ``table.json``'s (fractions); the plot draws them x 100. Worked by hand:

* A: per seed +0.01, +0.03 -> +1, +3 points; mean +2; CI [+0.5, +3.5] points lies above 0: green.
* B: per seed -0.02, -0.04 -> mean -3; CI [-0.05, -0.01] -> [-5, -1]: below 0.
* C: CI [-0.01, +0.02] crosses 0; D has one seed: no interval, so it "crosses" (nothing is claimed).
* E failed at every seed: no ``delta_acc``, no point.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chillfl.plots.differences import Difference, caption, differences, row_label


def ends(d: Difference) -> tuple[float, float]:
    """The interval's ends as drawn, in points."""
    assert d.interval is not None
    return d.interval.low, d.interval.high


def _stat(per_seed: list[float], mean: float, low: float | None, high: float | None) -> dict[str, Any]:
    return {"n": len(per_seed), "mean": mean, "std": 0.0, "ci_low": low, "ci_high": high, "per_seed": per_seed}


ROWS: list[dict[str, Any]] = [
    {"variant": "FedAvg", "delta_acc": _stat([0.0, 0.0], 0.0, 0.0, 0.0), "delta_local_acc": _stat([0.0, 0.0], 0.0, 0.0, 0.0)},
    {"variant": "A", "delta_acc": _stat([0.01, 0.03], 0.02, 0.005, 0.035), "delta_local_acc": _stat([-0.01, -0.03], -0.02, -0.035, -0.005)},
    {"variant": "B", "delta_acc": _stat([-0.02, -0.04], -0.03, -0.05, -0.01), "delta_local_acc": None},
    {"variant": "C", "delta_acc": _stat([0.0, 0.01], 0.005, -0.01, 0.02)},
    {"variant": "D", "delta_acc": _stat([0.04], 0.04, None, None)},
    {"variant": "E", "delta_acc": None},
]


def test_global_differences_are_the_rows_in_points_without_the_baseline() -> None:
    got = differences(ROWS, "FedAvg", "delta_acc")
    assert [d.label for d in got] == ["A", "B", "C", "D"]
    a, b, c, d = got
    assert (a.label, a.per_seed, a.mean, a.side) == ("A", pytest.approx((1.0, 3.0)), pytest.approx(2.0), "above")
    assert ends(a) == pytest.approx((0.5, 3.5)) and a.interval is not None and not a.interval.clipped
    assert (b.mean, b.side) == (pytest.approx(-3.0), "below") and ends(b) == pytest.approx((-5.0, -1.0))
    assert c.side == "crosses" and ends(c) == pytest.approx((-1.0, 2.0))
    assert d.interval is None and d.side == "crosses" and d.per_seed == pytest.approx((4.0,))


def test_local_differences_leave_out_variants_without_one() -> None:
    got = differences(ROWS, "FedAvg", "delta_local_acc")
    assert [(d.label, d.side) for d in got] == [("A", "below")]


def test_the_figure_is_written_only_when_there_is_a_difference(tmp_path: Path) -> None:
    from chillfl.plots.differences import plot_differences  # matplotlib: the test extra installs it

    assert plot_differences(ROWS, "FedAvg", tmp_path / "d.png", title="t", local=True)
    assert (tmp_path / "d.png").stat().st_size > 0
    assert not plot_differences(ROWS[:1], "FedAvg", tmp_path / "none.png")
    assert not (tmp_path / "none.png").exists()


def test_a_panel_goes_symmetric_log_when_its_values_span_more_than_20_points() -> None:
    """ROWS' global panel spans -5 (B's interval) to +4 (D): linear. A -60 outlier makes it span 64: symmetric log."""
    from chillfl.plots.differences import far_reaching

    assert not far_reaching(differences(ROWS, "FedAvg", "delta_acc"))
    outlier = {"variant": "Per-FedAvg", "delta_acc": _stat([-0.6, -0.6], -0.6, -0.61, -0.59)}
    assert far_reaching(differences([*ROWS, outlier], "FedAvg", "delta_acc"))


def test_the_caption_says_how_many_seeds_and_whether_there_is_an_interval() -> None:
    """At one seed the figure said "bar: 95 % CI" with no bar drawn and the seed's dot under the mean's diamond."""
    got = differences(ROWS, "FedAvg", "delta_acc")  # A, B, C at 2 seeds, D at 1
    assert caption(got) == "dots: 1-2 seeds; bar: 95 % CI"
    assert caption(got[:3]) == "dots: 2 seeds; bar: 95 % CI"
    assert caption(got[3:]) == "dots: 1 seed; no 95 % CI from one seed"


def test_a_difference_interval_past_100_points_is_drawn_clipped_and_named() -> None:
    """Hand-worked: per-seed differences +0.90, +0.10, +0.50 (fractions) -> mean +0.50, sample std 0.40, half width
    t(0.975, 2) * 0.40 / sqrt(3) = 4.302653 * 0.23094 = 0.993655, so the t-interval is [-0.493655, +1.493655]: in points
    [-49.37, +149.37]. A difference of two accuracies cannot pass +100 (its ``range`` [-1, 1], as ``chillfl compare``
    writes it), so the bar is drawn to [-49.37, +100.00], flagged clipped; the label ends in a dagger, the caption says why."""
    from chillfl.metrics.stats import FRACTION, paired_difference

    p = paired_difference([0.90, 0.10, 0.50], [0.0, 0.0, 0.0], FRACTION)
    assert (p.summary.low, p.summary.high) == (pytest.approx(-0.493655, abs=1e-6), pytest.approx(1.493655, abs=1e-6))
    wide = {"n": 3, "mean": p.summary.mean, "std": p.summary.std, "ci_low": p.summary.low, "ci_high": p.summary.high,
            "per_seed": list(p.differences), "range": [-1.0, 1.0]}
    (one,) = differences([ROWS[0], {"variant": "W", "delta_acc": wide}], "FedAvg", "delta_acc")
    assert ends(one) == (pytest.approx(-49.3655, abs=1e-3), 100.0) and one.interval is not None and one.interval.clipped
    assert one.side == "crosses" and row_label(one) == "W †"
    assert caption([one]) == "dots: 3 seeds; bar: 95 % CI; † bar clipped to ±100 points, the CI reaches past it"
    unbounded = differences([ROWS[0], {"variant": "W", "delta_acc": {**wide, "range": None}}], "FedAvg", "delta_acc")[0]  # an older table.json
    assert ends(unbounded) == (pytest.approx(-49.3655, abs=1e-3), pytest.approx(149.3655, abs=1e-3)) and row_label(unbounded) == "W"

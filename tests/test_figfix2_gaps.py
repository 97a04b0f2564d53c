"""Lines through rounds that were never evaluated, and values between gaps (report figvis, item 3), checked on the drawn lines.

Under ``eval.every`` = 3 the global accuracy is measured at rounds 3, 6, 7: a plain line read as values measured at 4
and 5, so every such line now has a dot per measured round. A null (a measured value with nothing finite to show)
was bridged while a NaN broke the line; both break it now. A finite value alone between gaps drew nothing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402


def every3(shift: float = 0.0) -> list[dict[str, Any]]:
    """Seven rounds evaluated at 3, 6 and 7 (``eval.every = 3``): the other records carry no global metrics."""
    out: list[dict[str, Any]] = []
    for rnd in range(1, 8):
        record: dict[str, Any] = {"round": rnd, "train_loss": 2.0 - 0.1 * rnd, "bytes_cumulative": 1000 * rnd}
        if rnd in (3, 6, 7):
            record.update(global_acc=0.1 * rnd + shift, global_loss=2.0 - 0.2 * rnd)
        out.append(record)
    return out


def line(ax: Any, label: str) -> Any:
    (found,) = [ln for ln in ax.get_lines() if ln.get_label().startswith(label)]
    return found


def test_a_run_evaluated_every_third_round_draws_a_marker_on_each_measured_round(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.run import plot_run

    plot_run(every3(), tmp_path / "accuracy_loss.png")
    ax_acc, ax_loss = drawn[-1].axes
    assert list(line(ax_acc, "global model, test set").get_xdata()) == [3, 6, 7]
    assert line(ax_acc, "global model, test set").get_marker() not in ("None", None, "")
    assert line(ax_loss, "global test loss").get_marker() not in ("None", None, "")
    assert line(ax_loss, "local train loss").get_marker() in ("None", None, "")  # measured every round: a plain line


def test_comparison_curves_bands_and_bytes_mark_skipped_rounds(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.bands import plot_band_curves
    from chillfl.plots.communication import plot_compare_accuracy_vs_bytes
    from chillfl.plots.run import plot_curves

    plot_curves({"FedAvg": every3(), "chilled": every3(0.05)}, tmp_path / "curves.png")
    plot_band_curves({"FedAvg": [every3(), every3(0.02)]}, tmp_path / "bands.png")
    plot_compare_accuracy_vs_bytes({"FedAvg": every3()}, tmp_path / "bytes.png")
    curves, bands, nbytes = drawn[-3:]
    for ax in curves.axes:
        assert {line(ax, name).get_marker() for name in ("FedAvg", "chilled")} == {"."}
    for ax in bands.axes:
        assert line(ax, "FedAvg").get_marker() == "."
    assert line(nbytes.axes[0], "FedAvg").get_marker() == "."


def test_a_null_breaks_the_line_as_a_nan_does_and_a_value_alone_between_gaps_is_drawn(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.bands import plot_band_curves
    from chillfl.plots.run import plot_run

    losses = [2.0, 1.8, math.nan, math.inf, None, 1.0]
    records = [{"round": rnd, "global_acc": 0.1 * rnd, "global_loss": loss} for rnd, loss in enumerate(losses, 1)]
    plot_run(records, tmp_path / "accuracy_loss.png")
    plot_band_curves({"FedAvg": [records, records]}, tmp_path / "bands.png")
    for ax in (drawn[0].axes[1], drawn[1].axes[1]):
        loss = ax.get_lines()[0]
        xs, ys = list(loss.get_xdata()), [float(y) for y in loss.get_ydata()]
        assert xs == [1, 2, 3, 4, 5, 6]  # the null round is on the line, as a gap: not bridged from round 4 to 6
        assert math.isnan(ys[4]) and ys[5] == 1.0
        assert loss.get_marker() not in ("None", None, "")  # round 6's 1.0, alone between the gap and the end, is drawn


def test_lone_point_rule() -> None:
    from chillfl.plots.figure import gap_marker, has_lone_point

    assert has_lone_point([1.0]) and has_lone_point([1.0, math.nan, 2.0, 3.0]) and has_lone_point([math.nan, 1.0, math.inf])
    assert not has_lone_point([1.0, 2.0, math.nan, 3.0, 4.0]) and not has_lone_point([])
    assert gap_marker([3, 6, 7]) == "." and gap_marker([1, 2, 3]) is None and gap_marker([]) is None


def test_a_gap_of_two_rounds_is_a_gap() -> None:
    """``eval.every = 2``, the commonest gap (rounds 2, 4, 6): marked in the figures and in the HTML report's curves."""
    from chillfl.plots.figure import gap_marker
    from chillfl.report.html import skips_rounds

    assert gap_marker([2, 4, 6]) == "." and gap_marker([1, 3]) == "."
    assert skips_rounds([2, 4, 6], [0.1, 0.2, 0.3]) and skips_rounds([1.0, 3.0], [0.1, 0.2])
    assert not skips_rounds([1, 2, 3], [0.1, 0.2, 0.3])


def test_a_key_null_in_every_round_draws_no_line(tmp_path: Path, drawn: list[Figure]) -> None:
    """Nothing ever measured (``local_acc`` without client evaluations): no legend entry over an empty line."""
    from chillfl.plots.figure import measured_series, nulls_as_nan
    from chillfl.plots.run import plot_run

    records = [{"round": rnd, "global_acc": 0.1 * rnd, "global_loss": 2.0 - 0.1 * rnd, "local_acc": None} for rnd in (1, 2, 3)]
    assert measured_series(records, "local_acc") == ([], []) and nulls_as_nan(records, "local_acc") == records
    plot_run(records, tmp_path / "accuracy_loss.png")
    assert [ln.get_label() for ln in drawn[0].axes[0].get_lines()] == ["global model, test set"]

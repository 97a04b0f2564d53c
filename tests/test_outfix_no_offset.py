"""Figures label their axes with the values themselves: a near-constant series put matplotlib's offset on the axis
("+6.86e2" beside ticks 0.065 ... 0.085 for 686.065 kB; "1e-6+2.30633" over ticks 4 ... 10), read as other values."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure as MatplotlibFigure  # noqa: E402

LOSSES = [2.30252, 2.30261, 2.30270]
BYTES = [686064, 686076, 686088]
RECORDS = [{"round": r, "global_acc": 0.1 + 0.01 * r, "local_acc": 0.2, "global_loss": loss, "train_loss": loss + 1e-6,
            "bytes_cumulative": b, "epsilon": 3.0 + 1e-6 * r, "attack_success_rate": 0.1, "agg_fgn": 1.0 + 1e-6 * r,
            "agg_clp": False, "temperatures": {"0": 0.25 + 1e-6 * r, "1": 0.25}}
           for r, loss, b in zip((1, 2, 3), LOSSES, BYTES)]
# accuracy and FGN never get an offset, whatever their values: rounds 100001-100003 give these plots' round axis one
# ("+1e5" beside ticks 1 ... 3) unless it is turned off
LATE_RECORDS = [dict(r, round=100000 + r["round"]) for r in RECORDS]


def _entry_points() -> dict[str, Callable[[Path], Any]]:
    from chillfl.plots.attacks import plot_attack
    from chillfl.plots.bands import plot_band_curves
    from chillfl.plots.communication import plot_accuracy_vs_bytes, plot_compare_accuracy_vs_bytes
    from chillfl.plots.pa3fed import plot_clp
    from chillfl.plots.privacy import plot_privacy
    from chillfl.plots.run import plot_curves, plot_run, plot_temperatures

    return {
        "plot_run": lambda path: plot_run(RECORDS, path),
        "plot_curves": lambda path: plot_curves({"a": RECORDS, "b": RECORDS}, path),
        "plot_band_curves": lambda path: plot_band_curves({"a": [RECORDS, RECORDS]}, path),
        "plot_accuracy_vs_bytes": lambda path: plot_accuracy_vs_bytes(RECORDS, path),
        "plot_compare_accuracy_vs_bytes": lambda path: plot_compare_accuracy_vs_bytes({"a": RECORDS}, path),
        "plot_temperatures": lambda path: plot_temperatures(RECORDS, path),
        "plot_privacy": lambda path: plot_privacy(RECORDS, path),
        "plot_attack": lambda path: plot_attack(LATE_RECORDS, path),
        "plot_clp": lambda path: plot_clp(LATE_RECORDS, path),
    }


def _saved_figures(monkeypatch: pytest.MonkeyPatch) -> list[MatplotlibFigure]:
    """Every figure drawn by ``savefig`` from here on, as it was drawn (tick labels and offsets set)."""
    saved: list[MatplotlibFigure] = []
    original = MatplotlibFigure.savefig

    def drawn(fig: MatplotlibFigure, *args: Any, **kwargs: Any) -> None:
        original(fig, *args, **kwargs)
        saved.append(fig)

    monkeypatch.setattr(MatplotlibFigure, "savefig", drawn)
    return saved


def _offsets(fig: MatplotlibFigure) -> list[str]:
    return [axis.get_offset_text().get_text() for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) if axis.get_offset_text().get_text()]


@pytest.mark.parametrize("entry", list(_entry_points()))
def test_no_figure_puts_an_offset_on_a_near_constant_series(entry: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    saved = _saved_figures(monkeypatch)
    _entry_points()[entry](tmp_path / "figure.png")
    (fig,) = saved
    assert _offsets(fig) == []


def test_a_loss_axis_reads_the_losses_themselves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """plot_run's loss panel: ticks 0.000525 ... 0.0007 under "+2.302" before; the values in full now."""
    from chillfl.plots.run import plot_run

    saved = _saved_figures(monkeypatch)
    plot_run(RECORDS, tmp_path / "run.png")
    (fig,) = saved
    loss = next(ax for ax in fig.axes if ax.get_ylabel() == "loss")
    labels = [float(t.get_text()) for t in loss.get_yticklabels() if t.get_text()]
    assert len(set(labels)) == len(labels) > 2 and all(2.3025 <= v <= 2.3028 for v in labels), labels


def test_a_kilobyte_axis_reads_the_kilobytes_themselves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """686.064 to 686.088 kB was labelled 0.065 ... 0.085 beside "+6.86e2"."""
    from chillfl.plots.communication import plot_accuracy_vs_bytes

    saved = _saved_figures(monkeypatch)
    plot_accuracy_vs_bytes(RECORDS, tmp_path / "bytes.png")
    (fig,) = saved
    labels = [float(t.get_text()) for ax in fig.axes for t in ax.get_xticklabels() if t.get_text()]
    assert labels and all(686.0 < v < 686.1 for v in labels), labels


def test_a_figure_made_from_matplotlibs_own_figure_is_saved_without_an_offset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The analyses build matplotlib's Figure and write it with save_figure: the offset is turned off there too."""
    from chillfl.plots.figure import save_figure

    saved = _saved_figures(monkeypatch)
    fig = MatplotlibFigure()
    fig.subplots().plot([1, 2, 3], LOSSES)
    save_figure(fig, tmp_path / "own.png")
    assert saved == [fig] and _offsets(fig) == []
    fig.savefig(io.BytesIO(), format="png")  # drawn again: still none
    assert _offsets(fig) == []


def test_a_chillfl_figure_is_laid_out_without_an_offset() -> None:
    """plots.figure.Figure turns the offset off as each axes is added, so ``tight_layout`` measures the labels that
    are drawn, before any save turns it off again (matplotlib's own Figure lays out "+2.302" here)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from chillfl.plots.figure import Figure

    fig = Figure()
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot([1, 2, 3], LOSSES)
    fig.tight_layout()
    assert ax.yaxis.get_offset_text().get_text() == ""


def test_a_figure_the_report_embeds_is_labelled_without_an_offset() -> None:
    from chillfl.report.html import _png

    fig = MatplotlibFigure()
    ax = fig.add_subplot()
    ax.plot([1, 2, 3], LOSSES)
    _png(fig)  # the report's own figures (its curves with seed bands) are drawn and embedded here, not saved
    assert ax.yaxis.get_offset_text().get_text() == ""

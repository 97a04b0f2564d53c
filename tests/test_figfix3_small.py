"""The smaller figure items (report figvis, item 10), checked on the drawn objects: a run that sent nothing got an
empty server panel and an axis of 0 to 1 byte; a variant with no curve (Individual: no global model) had a legend entry
that drew nothing; a band of one round was not drawn; accuracy read in shares there, in percent in differences.png and
the HTML report."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402


def test_a_run_that_sent_nothing_gets_no_empty_panel_and_says_so(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.communication import plot_compare_accuracy_vs_bytes

    alone = [{"round": r, "local_acc": 0.3 + 0.01 * r, "bytes_cumulative": 0} for r in range(1, 4)]
    assert plot_compare_accuracy_vs_bytes({"Individual": alone}, tmp_path / "bytes.png")
    (fig,) = drawn
    (ax,) = fig.axes  # the server model's panel, which no run measured, is left out
    assert ax.get_title() == "client models, own test splits" and "no bytes sent" in ax.get_xlabel() and not list(ax.get_xticks())


def test_a_variant_without_a_curve_is_named_and_accuracy_reads_in_percent(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.bands import plot_band_curves
    from chillfl.plots.run import plot_curves

    fedavg = [{"round": r, "global_acc": 0.2 * r, "global_loss": 2.0 - 0.2 * r} for r in range(1, 4)]
    alone = [{"round": r, "local_acc": 0.5, "local_loss": 1.0} for r in range(1, 4)]
    plot_curves({"FedAvg": fedavg, "Individual": alone}, tmp_path / "curves.png", title="cmp")
    plot_band_curves({"FedAvg": [fedavg, fedavg], "Individual": [alone, alone],
                      "Once": [[{"round": 1, "global_acc": 0.3, "global_loss": 2.0}], [{"round": 1, "global_acc": 0.5, "global_loss": 2.0}]]},
                     tmp_path / "bands.png")
    curves, bands = drawn
    texts = [t.get_text() for t in curves.legends[0].get_texts()]
    assert "Individual: no accuracy measured" in texts and "Individual: no loss measured" in texts
    assert "Individual (n=2): no accuracy measured" in [t.get_text() for t in bands.legends[0].get_texts()]
    for fig in (curves, bands):
        ax_acc = fig.axes[0]
        label = ax_acc.yaxis.get_major_formatter()(0.5, 0)  # a share of 0.5 labelled as percent
        assert label.startswith("50") and label.endswith("%"), label
    assert len(bands.axes[0].containers) == 1  # "Once"'s 1-round spread as an error bar

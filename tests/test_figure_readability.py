"""What a reader of the figures could not read, checked on the drawn matplotlib objects (not on pixels).

Found by looking at the figures of tiny runs and comparisons (2-5 rounds of digits):

* a comparison's ``curves.png`` (one seed and over seeds) and ``accuracy_vs_bytes.png`` drew a legend in each panel,
  over the curves of a few variants: now one legend beside the panels;
* ``temperatures.png`` put FedChill's T in 0.22-0.40 on a log axis labelled only 3x10^-1 and 4x10^-1 (the lowest
  client below every label), its legend in the middle of the lines; ``clp.png`` labelled FGN 6x10^-2 and 10^-1;
* ``differences.png``'s symmetric log axis ran -50, -20 and -10 into one another, and two rows sat on the frame;
* the HTML report's curves: a legend in every panel as tall as the panel, and the 11th group in the 1st one's colour;
* ``analyze cka`` titled "(shade: client models)" without a shade, coloured a shade by the fill cycle, not its run's
  line, and did not say whose Fig. 13 matrix it drew; ``analyze cache-ratio`` hid a cache duration at ratio 1 on the frame
  and covered the curves with its legend.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402


def overlaps(a: Any, b: Any) -> bool:
    """Whether two display boxes share more than a pixel's sliver."""
    return min(a.x1, b.x1) - max(a.x0, b.x0) > 1 and min(a.y1, b.y1) - max(a.y0, b.y0) > 1


def legend_beside(fig: Figure) -> list[str]:
    """The texts of the figure's one legend, after checking that no panel has its own and that it covers no panel."""
    assert all(ax.get_legend() is None for ax in fig.axes), "a legend inside a panel"
    (legend,) = fig.legends
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    box = legend.get_window_extent(renderer)
    assert not any(overlaps(box, ax.get_window_extent(renderer)) for ax in fig.axes), "the legend covers a panel"
    return [t.get_text() for t in legend.get_texts()]


def tick_texts(ax: Any, which: str = "y") -> list[str]:
    axis = ax.yaxis if which == "y" else ax.xaxis
    return [t.get_text() for t in (*axis.get_majorticklabels(), *axis.get_minorticklabels()) if t.get_text() and t.get_visible()]


# six variants, three rounds, made up: each a line, its loss falling
VARIANTS = ["FedAvg", "FedAvg + chilling T=0.5", "FedAvg, eps=8", "FedAvg + chilling T=0.5, eps=8", "DS-FL", "SCARLET, eps=8"]


def records(i: int, shift: float = 0.0) -> list[dict[str, Any]]:
    return [{"round": r, "global_acc": 0.1 * r + 0.05 * i + shift, "global_loss": 2.0 - 0.1 * r + 0.2 * i, "local_acc": 0.5 + 0.1 * r,
             "bytes_cumulative": 1000 * r * (i + 1)} for r in (1, 2, 3)]


def test_a_comparisons_curves_have_one_legend_beside_the_panels(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.bands import plot_band_curves
    from chillfl.plots.communication import plot_compare_accuracy_vs_bytes
    from chillfl.plots.run import plot_curves

    one_seed = {label: records(i) for i, label in enumerate(VARIANTS)}
    plot_curves(one_seed, tmp_path / "curves.png", title="one seed")
    plot_band_curves({label: [records(i), records(i, 0.02)] for i, label in enumerate(VARIANTS)}, tmp_path / "bands.png", title="seeds")
    plot_compare_accuracy_vs_bytes(one_seed, tmp_path / "bytes.png", title="bytes")
    curves, bands, by_bytes = drawn
    assert legend_beside(curves) == VARIANTS
    assert legend_beside(bands) == [f"{label} (n=2)" for label in VARIANTS]
    assert legend_beside(by_bytes) == VARIANTS
    # the data are as given: FedAvg + chilling (i = 1) at round 3: 0.3 + 0.05; its bytes 1000 * 3 * 2 = 6 kB
    acc = {line.get_label(): list(line.get_ydata()) for line in curves.axes[0].get_lines()}
    assert acc["FedAvg + chilling T=0.5"] == pytest.approx([0.15, 0.25, 0.35])
    server = {line.get_label(): list(line.get_xdata()) for line in by_bytes.axes[0].get_lines()}
    assert server["FedAvg + chilling T=0.5"] == pytest.approx([2.0, 4.0, 6.0])  # kB
    # the y axes say what they plot, not the record keys global_acc / global_loss / local_acc
    assert [ax.get_ylabel() for ax in curves.axes] == ["accuracy: global model, test set", "loss: global model, test set (T = 1)"]
    assert [ax.get_ylabel() for ax in bands.axes] == ["accuracy: global model, test set", "loss: global model, test set (T = 1)"]
    plot_band_curves({"FedPer": [records(0)]}, tmp_path / "local.png", key="local_acc")
    assert [ax.get_ylabel() for ax in drawn[-1].axes] == ["accuracy: local models, own splits", "loss: local models, own splits"]


def test_temperatures_within_a_decade_on_a_linear_axis_across_decades_labelled_plainly(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.run import plot_temperatures

    # FedChill's initial T of six clients, 0.22 to 0.40, unchanged over 4 rounds (the tiny run's): a factor of 1.8
    within = [{"round": r, "temperatures": {str(c): t for c, t in enumerate((0.2225, 0.4039, 0.3397, 0.2687, 0.3195, 0.3009))}} for r in (1, 2, 3, 4)]
    assert plot_temperatures(within, tmp_path / "t.png")
    # a decaying T from 1 to 0.01: a factor of 100
    across = [{"round": r, "temperatures": {"0": 10.0 ** -r, "1": 1.0}} for r in (0, 1, 2)]
    assert plot_temperatures(across, tmp_path / "t2.png")
    (ax,) = drawn[0].axes
    assert ax.get_yscale() == "linear"
    assert legend_beside(drawn[0]) == [f"client {c}" for c in range(6)]
    (ax2,) = drawn[1].axes
    assert ax2.get_yscale() == "log"
    labels = tick_texts(ax2)
    assert {"0.01", "0.1", "1"} <= set(labels) and not any("10^" in t or "times" in t for t in labels), labels


def test_fgn_on_a_log_axis_is_labelled_in_plain_numbers_also_within_a_decade(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.pa3fed import plot_clp

    # the tiny PA3Fed run's FGN: 0.143 .. 0.047 (0.05 and 0.1 are in view); then 0.061 .. 0.089 (no 1, 2 or 5 in view)
    wide = [{"round": r, "global_acc": 0.5, "agg_fgn": f, "agg_clp": r == 5} for r, f in enumerate((0.1426, 0.0707, 0.0605, 0.0472, 0.0490), 1)]
    narrow = [{"round": r, "global_acc": 0.5, "agg_fgn": f} for r, f in enumerate((0.089, 0.075, 0.061), 1)]
    assert plot_clp(wide, tmp_path / "clp.png") and plot_clp(narrow, tmp_path / "clp2.png")
    for fig, expected in zip(drawn, ({"0.05", "0.1"}, {"0.07", "0.08"})):
        ax_fgn = fig.axes[1]
        labels = tick_texts(ax_fgn)
        assert ax_fgn.get_yscale() == "log" and expected <= set(labels) and not any("10^" in t for t in labels), labels
        assert ax_fgn.get_ylabel() == "FGN (log scale)"  # as the loss panels say theirs: a dip reads deeper on a log axis
        assert list(ax_fgn.get_lines()[0].get_ydata()) == [r["agg_fgn"] for r in (wide if expected == {"0.05", "0.1"} else narrow)]


def test_a_log_axis_locates_its_ticks_once_per_set_not_once_per_label(tmp_path: Path) -> None:
    """Deciding per label whether the view is sparse located every tick again for each label: a figure with log axes over
    eight decades (~80 ticks) took 0.47 s to save, against 0.20 s. The locator's calls per draw are counted, not timed."""
    from matplotlib.ticker import LogLocator

    from chillfl.plots.figure import Figure as PlotFigure, log_scale, save_png

    fig = PlotFigure()
    ax = fig.add_subplot()
    ax.plot([1e-3, 1e3], [1e-4, 1e4])
    log_scale(ax, "y")
    calls = [0]

    class Counting(LogLocator):
        def __call__(self) -> Any:
            calls[0] += 1
            return super().__call__()

    ax.yaxis.set_minor_locator(Counting(subs=(2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)))
    save_png(fig, tmp_path / "log.png")
    ticks = len(ax.yaxis.get_minorticklocs())
    assert ticks > 40 and calls[0] < 20, (ticks, calls[0])  # 10 here; once per label it was 277
    assert {"0.0002", "0.0005", "2", "50"} <= set(tick_texts(ax))  # the labels are unchanged: 1, 2 and 5 of each decade


def stat(per_seed: list[float], low: float, high: float) -> dict[str, Any]:
    return {"n": len(per_seed), "mean": sum(per_seed) / len(per_seed), "ci_low": low, "ci_high": high, "per_seed": per_seed, "range": [-1.0, 1.0]}


# the tiny comparison's table.json (fractions): per seed, 95 % CI
TABLE = [
    {"variant": "FedAvg", "delta_acc": None},
    {"variant": "FedAvg + chilling T=0.5", "delta_acc": stat([0.0808, 0.1086, 0.0808], 0.0501, 0.13)},
    {"variant": "FedAvg, eps=8", "delta_acc": stat([-0.5153, -0.4234, -0.4318], -0.5831, -0.3306)},
    {"variant": "FedAvg + chilling T=0.5, eps=8", "delta_acc": stat([-0.507, -0.429, -0.429], -0.5668, -0.3431)},
    {"variant": "DS-FL", "delta_acc": stat([-0.5543, -0.4763, -0.4568], -0.624, -0.3677)},
    {"variant": "SCARLET, eps=8", "delta_acc": stat([-0.663, -0.5209, -0.5153], -0.7742, -0.3585)},
]


def test_differences_on_a_symmetric_log_axis_have_tick_labels_apart_and_rows_off_the_frame(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.differences import plot_differences

    assert plot_differences(TABLE, "FedAvg", tmp_path / "d.png")
    # two rows (the pfl comparison's): the autoscaled view had them on the top and bottom frame
    assert plot_differences(TABLE[:3], "FedAvg", tmp_path / "d2.png")
    renderer = drawn[0].canvas.get_renderer()  # type: ignore[attr-defined]
    (ax,) = drawn[0].axes
    assert ax.get_xscale() == "symlog"
    shown = [t for t in ax.xaxis.get_majorticklabels() if t.get_text()]
    assert len(shown) >= 5 and "0" in [t.get_text() for t in shown]
    boxes = sorted((t.get_window_extent(renderer) for t in shown), key=lambda box: box.x0)
    gaps = [b.x0 - a.x1 for a, b in zip(boxes, boxes[1:])]
    assert min(gaps) >= 10, (gaps, [t.get_text() for t in shown])  # pixels at 110 dpi: between -20 and -10 there were 2.5, after -10 7
    (ax2,) = drawn[1].axes
    low, high = ax2.get_ylim()
    assert low <= -0.5 and high >= 1.5  # rows at y = 0 and 1, half a row from the frame


def test_report_curves_one_legend_under_the_panels_and_no_two_groups_alike() -> None:
    import chillfl.report.html as page
    from chillfl.config import RunConfig
    from chillfl.report.html import Group, Run, curves_figure

    figures: list[Figure] = []
    original = page._png
    page._png = lambda fig: figures.append(fig) or ""  # type: ignore[assignment]
    try:
        groups = [Group(f"variant {i}", [Run(Path("x"), RunConfig(), records(i), {})]) for i in range(12)]
        assert curves_figure(groups, (("global_acc", "accuracy"), ("global_loss", "loss"))) == ""
    finally:
        page._png = original
    (fig,) = figures
    fig.canvas.draw()  # type: ignore[attr-defined]
    assert legend_beside(fig) == [f"variant {i} (n=1)" for i in range(12)]
    styles = [(line.get_color(), line.get_linestyle()) for line in fig.axes[0].get_lines()]
    assert len(set(styles)) == 12  # the 11th and 12th dashed: C0 and C1 solid are the 1st and 2nd
    from chillfl.plots.styles import variant_style

    assert variant_style(0) == ("C0", "-") and variant_style(10) == ("C0", "--") and variant_style(21) == ("C1", ":")


def test_cka_says_shade_only_where_drawn_in_its_runs_colour_and_whose_matrix(tmp_path: Path, drawn: list[Figure]) -> None:
    from matplotlib.colors import to_rgba

    from chillfl.analysis.cka import plot_cka

    layers = {"hidden.0": 0.9, "head": 0.5}
    plain = {"layers": list(layers), "global_vs_reference": layers}
    clients = {**plain, "clients_vs_reference": {"1": {"hidden.0": 0.8, "head": 0.4}, "2": {"hidden.0": 0.95, "head": 0.6}}, "round": 5,
               "matrix": {"layer": "head", "models": ["INIT", "AGG"], "cka": [[1.0, 0.7], [0.7, 1.0]]}}
    plot_cka({"runs": {"a": plain}}, tmp_path / "cka.png")
    plot_cka({"runs": {"a": plain, "b": clients}}, tmp_path / "cka2.png")
    assert "shade" not in drawn[0].axes[0].get_title()
    ax, ax_matrix = drawn[1].axes[:2]
    assert "shade" in ax.get_title() and ax_matrix.get_title().startswith("b: head CKA, round 5")
    (fill,) = ax.collections
    line_b = ax.get_lines()[1]
    assert to_rgba(fill.get_facecolor()[0], 1.0) == to_rgba(line_b.get_color(), 1.0)  # b's orange, not the fill cycle's first blue


def test_cache_ratio_keeps_a_ratio_of_one_off_the_frame_and_its_legend_off_the_curves(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.analysis.softlabels import plot_cache_ratio

    plot_cache_ratio({10: [0.0, 0.3, 0.33, 0.3], 800: [0.0, 0.5, 1.0, 1.0]}, tmp_path / "c.png")
    (fig,) = drawn
    (ax,) = fig.axes
    assert ax.get_ylim()[1] > 1.0 and ax.get_ylim()[0] < 0.0
    assert legend_beside(fig) == ["D=10", "D=800"]
    assert all(float(t).is_integer() for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1])


def test_the_clp_comparison_keeps_the_key_to_its_dots_under_a_title(tmp_path: Path, drawn: list[Figure]) -> None:
    """``python -m chillfl.plots.pa3fed FOLDER`` titles the figure with the folder's name, which replaced the only words
    that say what the dots are."""
    from chillfl.plots.pa3fed import plot_compare_clp

    run = [{"round": r, "global_acc": 0.1 * r, "agg_clp": r == 2, "agg_adapted": r == 2} for r in (1, 2, 3)]
    assert plot_compare_clp({"PA3Fed": run}, tmp_path / "clp_curves.png", title="pa3fed-compare")
    (ax,) = drawn[0].axes
    assert ax.get_title() == "pa3fed-compare: accuracy (dots: adapted CLP rounds)"
    dots = [line for line in ax.get_lines() if line.get_linestyle() == "None"]
    assert [list(line.get_xdata()) for line in dots] == [[2]] and list(dots[0].get_ydata()) == [pytest.approx(0.2)]


def test_the_partition_heat_map_names_every_class_and_client(tmp_path: Path, drawn: list[Figure]) -> None:
    """Ten classes were ticked 0, 2, 4, 6, 8: a reader counted rows to find class 7."""
    import numpy as np

    from chillfl.data.show import plot_class_heatmap

    plot_class_heatmap(np.arange(60).reshape(6, 10), tmp_path / "p.png", title="six clients")
    plot_class_heatmap(np.ones((50, 100)), tmp_path / "p2.png")  # CIFAR-100 over 50 clients: matplotlib's own ticks
    figures = drawn
    ax = figures[0].axes[0]
    assert list(ax.get_yticks()) == list(range(10)) and list(ax.get_xticks()) == list(range(6))
    assert len(figures[1].axes[0].get_yticks()) < 100
    # the cell of client 1, class 7 holds counts[1, 7] = 17
    assert "17" in [t.get_text() for t in ax.texts if t.get_position() == (1, 7)]


def test_a_runs_exploding_train_loss_puts_its_loss_panel_on_a_log_axis(tmp_path: Path, drawn: list[Figure]) -> None:
    """A tiny run at lr 3 and T = 0.05: train loss 5.6e7 in round 1, then about 400; test loss 22 to 14. On a linear axis
    (offset 1e7) every value after round 1 lay on 0."""
    from chillfl.plots.run import plot_run

    losses = ((21.71, 56124618.8), (15.22, 430.04), (14.62, 401.26), (13.85, 406.05))
    records = [{"round": r, "global_acc": 0.1, "global_loss": g, "train_loss": t} for r, (g, t) in enumerate(losses, 1)]
    plot_run(records, tmp_path / "accuracy_loss.png", "diverge")
    ax_loss = drawn[0].axes[1]
    # the median of the last values (13.85, 406.05) is 406.05; the peak 5.6e7 > 10 x 406.05
    assert ax_loss.get_yscale() == "log" and ax_loss.get_title() == "Loss (log scale)"
    assert [list(line.get_ydata()) for line in ax_loss.get_lines()] == [[g for g, _ in losses], [t for _, t in losses]]
    plot_run([{**r, "train_loss": 2.0} for r in records], tmp_path / "calm.png")
    assert drawn[1].axes[1].get_yscale() == "linear"  # 21.7 < 10 x 13.85's median: no reason for a log axis


def test_a_comparison_of_more_than_ten_variants_draws_no_two_alike(tmp_path: Path, drawn: list[Figure]) -> None:
    """Matplotlib's ten colours gave the 11th variant the 1st one's line in curves.png and accuracy_vs_bytes.png; a
    legend of sixteen and more entries ran past the figure's foot in one column."""
    from chillfl.plots.bands import plot_band_curves
    from chillfl.plots.communication import plot_compare_accuracy_vs_bytes
    from chillfl.plots.run import plot_curves

    many = {f"variant {i}": records(i) for i in range(20)}
    plot_curves(many, tmp_path / "curves.png")
    plot_band_curves({label: [one] for label, one in many.items()}, tmp_path / "bands.png")
    plot_compare_accuracy_vs_bytes(many, tmp_path / "bytes.png")
    for fig in drawn:
        styles = {(line.get_color(), line.get_linestyle()) for line in fig.axes[0].get_lines()}
        assert len(styles) == 20
        assert len(legend_beside(fig)) == 20
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        box = fig.legends[0].get_window_extent(renderer)
        assert box.y0 >= 0 and box.y1 <= fig.bbox.height  # two columns of ten: within the figure


def test_the_temperature_sweeps_colour_bar_reads_in_plain_numbers(tmp_path: Path, drawn: list[Figure]) -> None:
    """T in 0.1, 0.5, 1 on a log colour bar was labelled 10^-1 and 10^0 only: 0.5 had no label to read it by."""
    import numpy as np

    from chillfl.analysis.temperature_sweep import SweepResult, plot_scatter

    # two clients, T in 0.1, 0.5, 1: accuracies made up; client 0 best at 0.5, client 1 at 1
    acc = np.array([[0.4, 0.8, 0.7], [0.5, 0.9, 0.95]])
    result = SweepResult([0.1, 0.5, 1.0], acc, acc, np.ones((2, 10)), np.array([0.5, 0.7]), np.array([0.5, 1.0]), np.array([0.8, 0.95]),
                         np.array([0.1, 0.0]), {"best_temperature": [{"measure": "ratio", "r": 1.0, "p": 0.0, "n": 2}]})
    plot_scatter(result, tmp_path / "scatter.png", title="sweep")
    colour_bar = drawn[0].axes[-1]
    labels = tick_texts(colour_bar)
    assert {"0.1", "0.5", "1"} <= set(labels) and not any("10^" in t for t in labels), labels


def test_a_sweep_with_one_best_temperature_says_why_it_has_no_r(tmp_path: Path, drawn: list[Figure]) -> None:
    """Every client best at the same T: the trend's legend read "Pearson r = nan"; it says why there is none, as the table does."""
    import numpy as np

    from chillfl.analysis.temperature_sweep import SweepResult, plot_scatter
    from chillfl.metrics.correlation import correlation_table

    # both clients best at T = 0.5 (accuracies made up): nothing to correlate the heterogeneity scores 0.5, 0.7 with
    acc = np.array([[0.4, 0.8, 0.7], [0.5, 0.9, 0.85]])
    rows = correlation_table({"ratio": np.array([0.5, 0.7])}, np.array([0.5, 0.5]))
    assert rows[0]["undefined"] == "every client's value is 0.5: nothing to correlate with"
    result = SweepResult([0.1, 0.5, 1.0], acc, acc, np.ones((2, 10)), np.array([0.5, 0.7]), np.array([0.5, 0.5]), np.array([0.8, 0.9]),
                         np.array([0.1, 0.0]), {"best_temperature": rows})
    plot_scatter(result, tmp_path / "scatter.png", title="sweep")
    (legend,) = [ax.get_legend() for ax in drawn[0].axes if ax.get_title().startswith("best temperature")]
    assert [t.get_text() for t in legend.get_texts()] == ["trend (no Pearson r: every client's value is 0.5: nothing to correlate with)"]


def test_a_long_run_name_is_wrapped_inside_the_figure_not_cut_at_its_edges(tmp_path: Path, drawn: list[Figure]) -> None:
    """A comparison run's name (every option of its variant, then the seed) ran past both edges of attack.png's title."""
    from chillfl.plots.attacks import plot_attack
    from chillfl.plots.run import plot_run

    name = "backdoor-digits-FedAvg___chilling_T0.5_client.lr0.05_partition.alpha0.1_attack.fraction0.2-s0"
    records = [{"round": r, "global_acc": 0.1 * r, "attack_success_rate": 0.2, "global_loss": 1.0, "train_loss": 1.0} for r in (1, 2, 3)]
    assert plot_attack(records, tmp_path / "attack.png", f"{name}: attack backdoor")
    plot_run(records, tmp_path / "accuracy_loss.png", name + "-and-some-more-of-a-grid-point")
    for fig in drawn:
        title = fig._suptitle  # type: ignore[attr-defined]
        box = title.get_window_extent(fig.canvas.get_renderer())  # type: ignore[attr-defined]
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, title.get_text()
        expected = name + (": attack backdoor" if fig is drawn[0] else "-and-some-more-of-a-grid-point")
        assert "".join(title.get_text().split()) == "".join(expected.split())  # every character kept; wrapping drops a space


def test_aggregation_accuracy_names_its_mean_bars(tmp_path: Path, drawn: list[Figure]) -> None:
    """The black bars (each group's mean change) were in no legend and no title."""
    from chillfl.analysis.aggregation import plot_accuracy_change

    # participating clients change by -14, +2, +3 points (mean -3); non-participating by +48, +24, -23 (mean +16.33)
    clients = [{"participating": p, "delta": d} for p, d in ((True, -0.14), (True, 0.02), (True, 0.03), (False, 0.48), (False, 0.24), (False, -0.23))]
    plot_accuracy_change({"runs": {"a": {"clients": clients}, "b": {"clients": clients}}}, tmp_path / "agg.png")
    (ax,) = drawn[0].axes
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["participating", "non-participating", "mean of the group"]
    means = [segments[0][0][1] for segments in (c.get_segments() for c in ax.collections if hasattr(c, "get_segments")) if segments]
    assert means[:2] == [pytest.approx(-3.0), pytest.approx(49 / 3)]



def test_temperature_line_breaks_where_a_client_sat_out(tmp_path: Path, drawn: list[Figure]) -> None:
    """Under partial participation a client's T is recorded only in the rounds it trained: the line joined round 1 to
    round 4 through rounds it never trained at. NaN in the rounds it sat out breaks the line there, and a dot marks
    each round it took part in (a round alone between gaps draws no line)."""
    from chillfl.plots.run import plot_temperatures

    records = [{"round": 1, "temperatures": {"0": 0.5, "1": 0.9}}, {"round": 2, "temperatures": {"1": 0.8}},
               {"round": 3, "temperatures": {"1": 0.7}}, {"round": 4, "temperatures": {"0": 0.25, "1": 0.6}}]
    assert plot_temperatures(records, tmp_path / "t.png")
    (ax,) = drawn[0].axes
    sat_out, every = ax.get_lines()
    assert list(sat_out.get_xdata()) == [1, 2, 3, 4] and list(every.get_xdata()) == [1, 2, 3, 4]
    y = [float(v) for v in sat_out.get_ydata()]
    assert y[0] == 0.5 and math.isnan(y[1]) and math.isnan(y[2]) and y[3] == 0.25
    assert sat_out.get_marker() == "." and every.get_marker() in ("None", None, "")
    assert [float(v) for v in every.get_ydata()] == [0.9, 0.8, 0.7, 0.6]

"""Figures read as images (report figvis, items 6, 7 and 10, and the nulls), checked on the drawn matplotlib objects.

* privacy.png, attack.png, clp.png and clp_curves.png drew a straight line across a round whose value was null (not
  measured), where the run curves break (:func:`chillfl.plots.figure.measured_series`);
* legends inside the axes covered data: attack.png, the reliability diagram, the temperature-sweep scatter, clp_curves.png;
* clp_curves.png's title (the folder's name) ran past the figure's edges; a finished variant with no global accuracy
  was left out silently, and a band of one round drew nothing;
* the reliability diagram's green line had no key; a title centred over the whole figure stood off the panels when a
  legend stands beside them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.figure import Figure  # noqa: E402


def records() -> list[dict[str, Any]]:
    """Six rounds; round 3's attack success, epsilon, FGN and accuracy recorded as null (measured, nothing finite)."""
    out: list[dict[str, Any]] = []
    for rnd in range(1, 7):
        null = rnd == 3
        out.append({"round": rnd, "global_acc": None if null else 0.1 * rnd, "attack_success_rate": None if null else 0.05 * rnd,
                    "epsilon": None if null else 0.5 * rnd, "agg_fgn": None if null else 1.0 / rnd, "agg_clp": rnd == 2,
                    "agg_adapted": rnd == 2})
    return out


def ys(line: Any) -> list[float]:
    return [float(y) for y in line.get_ydata()]


def labelled(ax: Any, start: str) -> Any:
    (found,) = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith(start)]
    return found


def overlaps(a: Any, b: Any) -> bool:
    """Whether two drawn artists' boxes (display units) overlap."""
    one, two = a.get_window_extent(), b.get_window_extent()
    return one.x0 < two.x1 and two.x0 < one.x1 and one.y0 < two.y1 and two.y0 < one.y1


def test_a_null_round_breaks_the_privacy_attack_and_clp_lines(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.attacks import plot_attack
    from chillfl.plots.pa3fed import plot_clp, plot_compare_clp_seeds
    from chillfl.plots.privacy import plot_privacy

    assert plot_attack(records(), tmp_path / "attack.png")
    assert plot_privacy(records(), tmp_path / "privacy.png")
    assert plot_clp(records(), tmp_path / "clp.png")
    assert plot_compare_clp_seeds({"PA3Fed": [records(), records()]}, tmp_path / "clp_curves.png")
    attack, privacy, clp, curves = drawn
    (ax,) = attack.axes
    for start in ("global accuracy", "attack success"):
        line = labelled(ax, start)
        assert list(line.get_xdata()) == [1, 2, 3, 4, 5, 6] and math.isnan(ys(line)[2]), start  # round 3 a gap, not bridged
    ax_acc, ax_eps = privacy.axes
    assert math.isnan(ys(labelled(ax_eps, "epsilon"))[2])
    assert sum(math.isnan(x) or math.isnan(y) for x, y in zip(ax_acc.get_lines()[0].get_xdata(), ys(ax_acc.get_lines()[0]))) == 1
    ax_acc, ax_fgn = clp.axes
    assert math.isnan(ys(labelled(ax_acc, "global model"))[2]) and math.isnan(ys(labelled(ax_fgn, "FGN"))[2])
    assert math.isnan(ys(labelled(curves.axes[0], "PA3Fed"))[2])


def test_the_attack_figure_keeps_its_legend_off_the_curves(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.attacks import plot_attack

    plot_attack(records(), tmp_path / "attack.png")
    (fig,) = drawn
    (ax,) = fig.axes
    assert ax.get_legend() is None and len(fig.legends) == 1 and not overlaps(fig.legends[0], ax)


def test_the_reliability_diagram_keys_every_mark_under_its_panels(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.analysis.calibration import calibration_of, plot_reliability
    import torch

    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [0.5, 0.0], [0.0, 4.0], [1.0, 0.0]])
    run = calibration_of(logits, torch.tensor([0, 0, 1, 1, 1, 0]), bins=4)
    plot_reliability({"runs": {"a": run, "b": run}}, tmp_path / "reliability.png")
    (fig,) = drawn
    assert not any(ax.get_legend() for ax in fig.axes)  # none inside a panel, where it covered the first one's bars
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert any("share of samples" in t for t in texts) and "perfect calibration" in texts  # the green and grey lines named
    assert not any(overlaps(legend, ax) for ax in fig.axes)
    assert "green" not in fig.get_suptitle()


def test_the_temperature_sweep_scatter_puts_its_legends_under_the_panels(tmp_path: Path, drawn: list[Figure]) -> None:
    from test_figfix2_sweep import sweep

    from chillfl.analysis.temperature_sweep import plot_scatter

    plot_scatter(sweep(), tmp_path / "scatter.png")  # type: ignore[arg-type]
    (fig,) = drawn
    legends = [(ax, ax.get_legend()) for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 2
    for ax, legend in legends:
        assert legend.get_window_extent().y1 < ax.get_window_extent().y0  # below the axes' data area
        assert legend.get_window_extent().y0 >= 0  # and inside the image


def test_the_clp_comparison_title_fits_the_figure_and_its_legend_stands_beside(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.pa3fed import plot_compare_clp_seeds

    one = [{"round": 1, "global_acc": 0.3, "agg_clp": True, "agg_adapted": True}]
    groups = {"PA3Fed": [records(), records()], "Individual": [[{"round": 1, "local_acc": 0.5}]],
              "OneRound": [one, [{**one[0], "global_acc": 0.5}]]}
    name = "a-very-long-comparison-folder-name-pa3fed-table2-cifar10-dirichlet-0.1-seeds-0-1-2-and-then-some-more"
    assert plot_compare_clp_seeds(groups, tmp_path / "clp_curves.png", title=name)
    (fig,) = drawn
    (ax,) = fig.axes
    title = ax.title.get_window_extent()
    assert title.x0 >= 0 and title.x1 <= fig.bbox.width  # inside the image: it ran past both edges
    assert abs((title.x0 + title.x1) / 2 - (ax.get_window_extent().x0 + ax.get_window_extent().x1) / 2) < 2  # over the axes
    assert ax.get_legend() is None and not overlaps(fig.legends[0], ax)
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "Individual: no global accuracy measured" in texts  # finished, no global model: said, not left out silently
    (bar,) = ax.containers  # the 1-round variant's spread over its two seeds: an error bar (a band of one round has no width)
    (segment,) = bar.lines[2][0].get_segments()
    assert [round(float(y), 6) for _, y in segment] == [round(0.4 - math.sqrt(0.02), 6), round(0.4 + math.sqrt(0.02), 6)]


def test_a_title_over_panels_with_a_legend_beside_is_centred_over_the_panels(tmp_path: Path, drawn: list[Figure]) -> None:
    from chillfl.plots.run import plot_curves

    fedavg = [{"round": r, "global_acc": 0.2 * r, "global_loss": 2.0 - 0.2 * r} for r in range(1, 4)]
    plot_curves({"FedAvg with a label of some length": fedavg}, tmp_path / "curves.png", title="a comparison")
    (fig,) = drawn
    (title,) = [t for t in fig.texts if t.get_text() == "a comparison"]
    left = min(ax.get_window_extent().x0 for ax in fig.axes)
    right = max(ax.get_window_extent().x1 for ax in fig.axes)
    centre = (title.get_window_extent().x0 + title.get_window_extent().x1) / 2
    assert abs(centre - (left + right) / 2) < 0.01 * fig.bbox.width and abs(centre - fig.bbox.width / 2) > 0.03 * fig.bbox.width

"""The report's and a comparison's figures: which seed accuracy_vs_bytes.png draws, axis labels and units, titles."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest

from chillfl.config import RunConfig
from chillfl.report.html import ACCURACY_CURVES, Group, Run, curves_figure


def recs(acc: float, rounds: int = 2) -> list[dict[str, Any]]:
    return [{"round": r + 1, "global_acc": acc, "global_loss": 1.0, "bytes_cumulative": 1000 * (r + 1)} for r in range(rounds)]


def test_accuracy_vs_bytes_draws_one_seed_for_every_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 0 of "hot" diverged: the figure titled "(seed 0)" drew hot's seed-1 run beside calm's seed-0 run. It now
    draws the first seed every variant finished (seed 1), for every line."""
    import chillfl.plots.bands
    import chillfl.plots.differences
    import chillfl.plots.privacy_utility
    import chillfl.report.compare as compare

    drawn: list[tuple[Mapping[str, Sequence[Mapping[str, Any]]], str]] = []
    monkeypatch.setattr(compare, "plot_compare_accuracy_vs_bytes", lambda curves, path, title="": drawn.append((curves, title)))
    for module, name in ((chillfl.plots.bands, "plot_band_curves"), (chillfl.plots.differences, "plot_differences"),
                         (chillfl.plots.privacy_utility, "plot_privacy_utility")):
        monkeypatch.setattr(module, name, lambda *args, **kwargs: None)
    calm0, calm1, hot1 = recs(0.1), recs(0.2), recs(0.3)
    rows = [{"variant": "calm", "seeds": [0, 1], "diverged_seeds": []}, {"variant": "hot", "seeds": [0, 1], "diverged_seeds": [0]}]
    compare.write_band_figures({"calm": [calm0, calm1], "hot": [hot1]}, 0, tmp_path, "cmp", rows)
    (curves, title), = drawn
    assert title == "cmp (seed 1)" and curves == {"calm": calm1, "hot": hot1}


def test_without_a_common_seed_each_line_names_its_own() -> None:
    from chillfl.report.compare import one_seed

    a0, b1 = recs(0.1), recs(0.2)
    rows = [{"variant": "a", "seeds": [0, 1], "diverged_seeds": [1]}, {"variant": "b", "seeds": [0, 1], "diverged_seeds": [0]},
            {"variant": "c", "seeds": [0, 1], "diverged_seeds": [0, 1]}]
    curves, seed = one_seed({"a": [a0], "b": [b1], "c": []}, 0, rows)
    assert seed == 0 and curves == {"a": a0, "b (seed 1)": b1, "c": []}  # c: no line, its colour kept for the others


def _captured(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    figures: list[Any] = []
    monkeypatch.setattr(module, name, lambda fig, *args, **kwargs: figures.append(fig) or "data:")
    return figures


def test_report_curves_are_in_percent_with_labelled_axes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table says "accuracies in %", the curves drew 0-1 on an unlabelled axis; their titles named a ± 1 std band
    where every group is one run."""
    import chillfl.report.html as page

    figures = _captured(monkeypatch, page, "_png")
    one = [Group("a", [Run(Path("a"), RunConfig(), recs(0.5), {})]), Group("b", [Run(Path("b"), RunConfig(), recs(0.25), {})])]
    curves_figure(one, ACCURACY_CURVES)
    (ax,) = figures[0].axes
    assert ax.get_ylabel() == "accuracy %" and sorted(max(line.get_ydata()) for line in ax.get_lines()) == [25.0, 50.0]
    assert "band" not in ax.get_title()
    seeds = [Group("a", [Run(Path(f"a{s}"), RunConfig(seed=s), recs(0.5), {}) for s in (0, 1)])]
    curves_figure(seeds, ACCURACY_CURVES)
    assert "band = ± 1 std" in figures[1].axes[0].get_title()


def test_a_comparisons_curves_name_it_over_the_panels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One seed's curves.png titled its accuracy panel with the comparison's name instead of "Accuracy"; over seeds
    of one seed each, the panel named a band that is not there."""
    import chillfl.plots.run as run_plots
    from chillfl.plots.bands import plot_band_curves

    figures = _captured(monkeypatch, run_plots, "save_png")
    run_plots.plot_curves({"a": recs(0.5), "b": recs(0.6)}, tmp_path / "c.png", title="cmp")
    plot_band_curves({"a": [recs(0.5)], "b": [recs(0.6)]}, tmp_path / "b.png", title="cmp")
    plot_band_curves({"a": [recs(0.5), recs(0.7)]}, tmp_path / "b2.png", title="cmp")
    titles = [(fig.get_suptitle(), fig.axes[0].get_title()) for fig in figures]
    assert titles[:2] == [("cmp", "Accuracy"), ("cmp", "Accuracy")]
    assert titles[2] == ("cmp", "Accuracy: mean over seeds, band = ± 1 std over seeds")

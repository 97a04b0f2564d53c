"""A stopped run's stop-round evaluation (``summary.json`` only, never ``metrics.jsonl``) in its figures and the HTML
report's curves: a point of its own (a star, its own legend entry), so the accuracy curve does not end at an earlier
evaluated round unsaid. Checked on what is drawn (the axes' lines, their data and labels), not on pixels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import chillfl
import chillfl.plots.attacks as attack_plots
import chillfl.plots.communication as communication_plots
import chillfl.plots.figure as figure_module
import chillfl.plots.privacy as privacy_plots
import chillfl.plots.run as run_plots
import chillfl.report.html as report
from chillfl.plots.stop import STOP_EVALUATION, StopPoint, stop_point, summary_stop_point

CONFIG: dict[str, Any] = {
    "dataset": {"name": "digits"}, "model": {"name": "mlp", "hidden": [16]}, "federation": {"num_clients": 4, "rounds": 6},
    "eval": {"every": 4, "client_split_size": 20}, "checkpoint": {"every": 0}, "seed": 5,
}


def stop_at_2(record: dict[str, Any], run: Any) -> None:
    if record["round"] == 2:
        run.stop("plateau")


def stars(fig: Any) -> list[tuple[str, list[float], list[float], str]]:
    """(panel title, xs, ys, label) of every line drawn with the stop-round marker."""
    return [(ax.get_title(), [float(v) for v in line.get_xdata()], [float(v) for v in line.get_ydata()], line.get_label())
            for ax in fig.axes for line in ax.get_lines() if line.get_marker() == "*"]


def captured(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[Any]:
    """The figures ``module.name`` (a save function taking the figure first) is given, instead of writing them."""
    figures: list[Any] = []
    monkeypatch.setattr(module, name, lambda fig, *args, **kwargs: figures.append(fig))
    return figures


def test_the_run_figure_draws_the_stop_rounds_evaluation_apart_from_its_curves(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    records = [{"round": 1, "train_loss": 2.0, "global_acc": 0.3, "global_loss": 1.5},
               {"round": 2, "train_loss": 1.8},
               {"round": 3, "train_loss": 1.6, STOP_EVALUATION: {"global_acc": 0.6, "global_loss": 1.1}}]
    figures = captured(monkeypatch, run_plots, "save_png")
    run_plots.plot_run(records, tmp_path / "a.png")
    (fig,) = figures
    assert stars(fig) == [("Accuracy", [3.0], [0.6], "global model, test set: stop-round evaluation, round 3 (summary.json only)"),
                          ("Loss", [3.0], [1.1], "global test loss (T=1): stop-round evaluation, round 3 (summary.json only)")]
    acc = fig.axes[0]
    curve = next(line for line in acc.get_lines() if line.get_label() == "global model, test set")
    assert list(curve.get_xdata()) == [1]  # the line is metrics.jsonl's rounds: the stop point is not joined to it
    star = next(line for line in acc.get_lines() if line.get_marker() == "*")
    assert star.get_color() == curve.get_color() and star.get_linestyle() == "None"
    assert any("stop-round evaluation" in text.get_text() for text in acc.get_legend().get_texts())

    figures.clear()
    run_plots.plot_run(records[:2], tmp_path / "b.png")  # no stop evaluation: nothing extra
    assert stars(figures[0]) == []


def test_the_attack_figure_draws_the_stop_rounds_success(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    records = [{"round": 1, "global_acc": 0.3, "attack_success_rate": 0.1},
               {"round": 2, "attackers": [], STOP_EVALUATION: {"global_acc": 0.5, "attack_success_rate": 0.2}}]
    figures = captured(monkeypatch, attack_plots, "finish_figure")
    assert attack_plots.plot_attack(records, tmp_path / "a.png")
    assert [(xs, ys, label.split(":")[0]) for _, xs, ys, label in stars(figures[0])] == [
        ([2.0], [0.5], "global accuracy"), ([2.0], [0.2], "attack success rate")]


def test_the_bytes_and_privacy_figures_draw_the_stop_point_at_the_stop_rounds_bytes_and_epsilon(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    records = [{"round": 1, "global_acc": 0.3, "bytes_cumulative": 1000, "epsilon": 0.5},
               {"round": 2, "bytes_cumulative": 2000, "epsilon": 0.8, STOP_EVALUATION: {"global_acc": 0.4}}]
    figures = captured(monkeypatch, figure_module, "finish_figure")  # imported by the bytes figure when it draws
    communication_plots.plot_accuracy_vs_bytes(records, tmp_path / "b.png", "r")
    assert [(xs, ys) for _, xs, ys, _ in stars(figures[0])] == [([2.0], [0.4])]  # 2000 B in kB, the unit of the 1-2 kB axis
    privacy_figures = captured(monkeypatch, privacy_plots, "finish_figure")
    assert privacy_plots.plot_privacy(records, tmp_path / "p.png")
    assert [(xs, ys) for _, xs, ys, _ in stars(privacy_figures[0])] == [([0.8], [0.4])]


def test_stop_points_read_only_well_formed_numbers() -> None:
    assert stop_point([{"round": 4, STOP_EVALUATION: {"global_acc": 0.5}}], "global_acc") == StopPoint(4, 0.5)
    assert stop_point([{"round": 4, STOP_EVALUATION: {"global_acc": None}}], "global_acc") is None  # not measured: nothing drawn
    assert stop_point([{"round": 4, "global_acc": 0.5}], "global_acc") is None and stop_point([], "global_acc") is None
    summary = {"stopped": {"round": 2, "reason": "x"}, STOP_EVALUATION: {"global_acc": 0.7, "global_loss": float("nan")}}
    assert summary_stop_point(summary, "global_acc") == StopPoint(2, 0.7)
    assert summary_stop_point(summary, "global_loss") is None  # non-finite: no point to draw
    assert summary_stop_point({STOP_EVALUATION: {"global_acc": 0.7}}, "global_acc") is None  # not stopped
    assert summary_stop_point({"stopped": {"round": "2"}, STOP_EVALUATION: {"global_acc": 0.7}}, "global_acc") is None  # hand-edited


def test_a_stopped_runs_figure_and_report_show_the_point_its_summary_reports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    figures = captured(monkeypatch, run_plots, "save_png")
    stopped = chillfl.run(config={**CONFIG, "name": "st", "out_dir": str(tmp_path / "out")}, callbacks=[stop_at_2], progress=False)
    folder = stopped.folder
    assert folder is not None
    summary = json.loads((folder / "summary.json").read_text())
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    acc, loss = summary["final_global_acc"], summary["final_global_loss"]
    assert summary[STOP_EVALUATION]["global_acc"] == acc and summary[STOP_EVALUATION]["global_loss"] == loss
    assert all("global_acc" not in r and STOP_EVALUATION not in r for r in metrics)  # metrics.jsonl as the uninterrupted run's

    accuracy = next(fig for fig in figures if fig.axes and fig.axes[0].get_title() == "Accuracy")  # accuracy_loss.png
    assert [(t, xs, ys) for t, xs, ys, _ in stars(accuracy)] == [("Accuracy", [2.0], [acc]), ("Loss", [2.0], [loss])]

    run = report.load_run(folder)
    groups = report.group_runs([run])
    assert report.stop_points(groups[0], "global_acc") == [StopPoint(2, acc)]
    assert report.stop_points(groups[0], "local_acc") == []  # measured in metrics.jsonl's round, nothing apart
    pages = captured(monkeypatch, report, "_png")
    assert report.curves_figure(groups, report.ACCURACY_CURVES) is None  # captured, not encoded
    (page,) = pages
    assert [(xs, ys) for _, xs, ys, _ in stars(page)] == [([2.0], [100.0 * acc])]  # the page's accuracy in %
    assert "stop-round evaluation (summary.json only)" in [text.get_text() for text in page.legends[0].get_texts()]
    assert report.curves_figure(groups, report.LOSS_CURVES) is None
    assert [(xs, ys) for _, xs, ys, _ in stars(pages[1])] == [([2.0], [loss])]

"""A comparison whose variant a hook stopped at a round ``eval.every`` skipped: its ``curves.png`` draws that run's
stop-round evaluation (``summary.json``'s ``stop_evaluation``) as a star of the variant's colour with its own legend
entry, as the run's own figures and the HTML report do; before, the variant's curve ended at an earlier evaluated round
unsaid. Read from the drawn artists (matplotlib Agg), not from pixels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import chillfl
import chillfl.plots.run as run_plots
from chillfl.report.compare import write_compare_figures
from chillfl.sweeps.resume import finished_run
from chillfl.runner import RunOutput
from test_stopround_figures import CONFIG, stars


def stop_at_5(record: dict[str, Any], run: Any) -> None:
    if record["round"] == 5:  # eval.every = 4 of 6 rounds: round 4 evaluated, round 5 for the summary alone
        run.stop("plateau")


def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures :func:`chillfl.plots.run.save_png` is given, written as before."""
    figures: list[Any] = []
    save = run_plots.save_png

    def keep(fig: Any, *args: Any, **kwargs: Any) -> Any:
        figures.append(fig)
        return save(fig, *args, **kwargs)

    monkeypatch.setattr(run_plots, "save_png", keep)
    return figures


def test_the_comparisons_curves_draw_a_stopped_variants_stop_round_evaluation(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    stopped = chillfl.run(config={**CONFIG, "name": "stopped", "out_dir": str(out)}, callbacks=[stop_at_5], progress=False)
    chillfl.run(config={**CONFIG, "name": "full", "out_dir": str(out)}, progress=False)
    outputs = {name: finished_run(out, name) for name in ("stopped", "full")}  # read back from the folder, as a resumed comparison reads them
    assert all(isinstance(o, RunOutput) for o in outputs.values())
    evaluated = stopped.summary["stop_evaluation"]  # round 5 of 6 at eval.every = 4: measured for the summary alone
    assert stopped.summary["stopped"]["round"] == 5 and [r["round"] for r in stopped.records if "global_acc" in r] == [4]
    figures = drawn(monkeypatch)
    write_compare_figures({k: v for k, v in outputs.items() if isinstance(v, RunOutput)}, out, "cmp")
    (fig,) = figures
    assert (out / "curves.png").is_file()
    assert stars(fig) == [
        ("Accuracy", [5.0], [evaluated["global_acc"]], "stopped: stop-round evaluation, round 5 (summary.json only)"),
        ("Loss", [5.0], [evaluated["global_loss"]], "stopped: stop-round evaluation, round 5 (summary.json only)"),
    ]
    acc = fig.axes[0]
    curve = next(line for line in acc.get_lines() if line.get_label() == "stopped")
    star = next(line for line in acc.get_lines() if line.get_marker() == "*")
    assert star.get_color() == curve.get_color() and star.get_linestyle() == "None"  # its variant's colour, not joined to its line
    assert list(curve.get_xdata()) == [4]  # the variant's line is metrics.jsonl's: the stop point is not joined to it
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert texts.count("stopped: stop-round evaluation, round 5 (summary.json only)") == 1  # one entry for both panels' stars


def test_a_comparison_without_a_stopped_run_draws_no_stop_point(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    records = [{"round": 1, "global_acc": 0.5, "global_loss": 1.0}]
    figures = drawn(monkeypatch)
    outputs = {"a": RunOutput(None, records, {"final_global_acc": 0.5}), "b": RunOutput(None, records, {})}
    write_compare_figures(outputs, tmp_path, "cmp")
    assert stars(figures[0]) == []


def test_a_variant_stopped_before_its_first_evaluated_round_is_its_star_not_no_accuracy_measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    records = [{"round": 1, "train_loss": 1.0}, {"round": 2, "train_loss": 0.9}]
    summary = {"stopped": {"round": 2, "reason": "plateau"}, "stop_evaluation": {"global_acc": 0.4, "global_loss": 1.2}}
    figures = drawn(monkeypatch)
    write_compare_figures({"s": RunOutput(None, records, summary), "b": RunOutput(None, [{"round": 1, "global_acc": 0.5, "global_loss": 1.0}], {})}, tmp_path, "cmp")
    (fig,) = figures
    assert [(xs, ys) for _, xs, ys, _ in stars(fig)] == [([2.0], [0.4]), ([2.0], [1.2])]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert not any("no accuracy" in t or "no loss" in t for t in texts), texts


def test_the_band_curves_draw_each_stopped_runs_point_apart_from_the_mean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Over seeds (``compare --seeds``): each stopped run's star, in its variant's colour, never in the mean."""
    from chillfl.plots.stop import with_stop_evaluation
    from chillfl.report.compare import write_band_figures

    whole = [{"round": 1, "global_acc": 0.5, "global_loss": 1.0}, {"round": 2, "global_acc": 0.6, "global_loss": 0.9}]
    stopped = with_stop_evaluation([whole[0], {"round": 2, "train_loss": 1.0}], {"stopped": {"round": 2, "reason": "plateau"}, "stop_evaluation": {"global_acc": 0.7, "global_loss": 0.8}})
    assert with_stop_evaluation(whole[:1], {"stop_evaluation": {"global_acc": 0.7}}) == whole[:1]  # not stopped: as it is
    figures = drawn(monkeypatch)
    write_band_figures({"a": [whole, stopped], "b": [whole, whole]}, 0, tmp_path, "cmp")
    fig = figures[0]
    assert [(title, xs, ys) for title, xs, ys, _ in stars(fig)] == [(fig.axes[0].get_title(), [2.0], [0.7]), ("Loss", [2.0], [0.8])]
    mean = next(line for line in fig.axes[0].get_lines() if line.get_label() == "a (n=2)")
    assert list(mean.get_ydata()) == [0.5]  # the mean is of the rounds every run's metrics.jsonl measured: the star is no part of it


def test_a_seed_stopped_before_its_first_evaluation_leaves_the_others_band(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A seed whose run stopped before any evaluated round has its star alone; the other seeds keep their band (n=2 of
    3): it emptied the rounds common to all seeds and hid them."""
    from chillfl.plots.stop import with_stop_evaluation
    from chillfl.report.compare import write_band_figures

    whole = [{"round": 1, "global_acc": 0.5, "global_loss": 1.0}, {"round": 2, "global_acc": 0.6, "global_loss": 0.9}]
    other = [{"round": 1, "global_acc": 0.3, "global_loss": 1.2}, {"round": 2, "global_acc": 0.8, "global_loss": 0.7}]
    early = with_stop_evaluation([{"round": 1, "train_loss": 1.0}], {"stopped": {"round": 1, "reason": "plateau"}, "stop_evaluation": {"global_acc": 0.2, "global_loss": 1.5}})
    figures = drawn(monkeypatch)
    write_band_figures({"a": [whole, other, early]}, 0, tmp_path, "cmp")
    acc = figures[0].axes[0]
    mean = next(line for line in acc.get_lines() if line.get_label() == "a (n=2 of 3)")
    assert list(mean.get_xdata()) == [1, 2] and [round(y, 9) for y in mean.get_ydata()] == [0.4, 0.7]  # (0.5+0.3)/2, (0.6+0.8)/2
    assert [(xs, ys) for title, xs, ys, _ in stars(figures[0]) if title == acc.get_title()] == [([1.0], [0.2])]

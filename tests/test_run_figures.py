"""Run figures are declared: the runner draws the common ones and those a method's spec names, looked up by name
in :mod:`chillfl.plots.registry`, where each plot module registers its own."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from chillfl import runner
from chillfl.aggregation.registry import algorithm_spec
from chillfl.config import load_config
from chillfl.plots.registry import COMMON, registered_figures
from chillfl.runner import run_experiment

BASE = {
    "dataset.name": "digits",
    "model.name": "mlp",
    "federation.num_clients": 4,
    "federation.rounds": 3,
    "client.batch_size": 32,
    "client.lr": 0.1,
    "eval.client_split_size": 20,
}


def _pngs(tmp_path: Path, **over: object) -> set[str]:
    out = run_experiment(load_config(None, {**BASE, "out_dir": str(tmp_path), **over}), progress=False)
    assert out.folder is not None
    return {p.name for p in out.folder.glob("*.png")}


def test_a_pa3fed_run_writes_its_declared_clp_figure_and_a_fedavg_run_does_not(tmp_path: Path) -> None:
    assert "clp" in algorithm_spec("pa3fed").figures and not algorithm_spec("fedavg").figures
    pa3fed = _pngs(tmp_path / "a", **{"algorithm.name": "pa3fed"})
    fedavg = _pngs(tmp_path / "b")
    assert "clp.png" in pa3fed and "accuracy_loss.png" in pa3fed
    assert "clp.png" not in fedavg and "accuracy_loss.png" in fedavg


def test_every_figure_a_spec_or_the_runner_names_is_registered() -> None:
    figures = registered_figures()
    assert {*COMMON, "accuracy_vs_bytes", "clp"} <= set(figures)
    assert figures["clp"].file == "clp.png"


def test_a_declared_figure_nobody_registers_is_skipped_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(runner, "method_figures", lambda config: ("nowhere",))
    with caplog.at_level(logging.WARNING, logger=runner.log.name):
        pngs = _pngs(tmp_path)
    assert "accuracy_loss.png" in pngs
    assert any("'nowhere'" in r.getMessage() for r in caplog.records)


def test_a_one_round_curve_is_drawn_and_its_round_ticked() -> None:
    """A 1-round run's curves were lines of one point (nothing drawn) over ticks 0.945 ... 1.05."""
    from chillfl.plots.figure import Figure
    from chillfl.plots.run import integer_rounds

    ax = Figure().add_subplot()
    (one,) = ax.plot([1], [0.15])
    (two,) = ax.plot([1, 2], [0.1, 0.2])
    integer_rounds(ax)
    assert one.get_marker() == "o" and two.get_marker() in ("None", None, "")
    ax2 = Figure().add_subplot()
    ax2.plot([1], [0.15])
    integer_rounds(ax2)
    assert list(ax2.get_xticks()) == [1]


def test_a_one_round_accuracy_vs_bytes_point_is_drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """accuracy_vs_bytes.png of a 1-round run was two empty panels (lines of one point)."""
    from chillfl.plots import figure
    from chillfl.plots.communication import plot_compare_accuracy_vs_bytes

    drawn: list[object] = []
    monkeypatch.setattr(figure, "save_png", lambda fig, path, dpi=100: drawn.append(fig))
    plot_compare_accuracy_vs_bytes({"one": [{"round": 1, "bytes_cumulative": 1000, "global_acc": 0.5, "local_acc": 0.6}]}, tmp_path / "b.png")
    (fig,) = drawn
    assert [line.get_marker() for ax in fig.axes for line in ax.get_lines()] == ["o", "o"]  # type: ignore[attr-defined]


def test_a_run_keeps_its_colour_in_both_accuracy_vs_bytes_panels(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run without local accuracy (eval.clients = none) shifted the next run's colour in the client panel."""
    from chillfl.plots import figure
    from chillfl.plots.communication import plot_compare_accuracy_vs_bytes

    drawn: list[object] = []
    monkeypatch.setattr(figure, "save_png", lambda fig, path, dpi=100: drawn.append(fig))
    rec = [{"round": r, "bytes_cumulative": 1000 * r, "global_acc": 0.5, "local_acc": 0.6} for r in (1, 2)]
    plot_compare_accuracy_vs_bytes({"a": [{k: v for k, v in r.items() if k != "local_acc"} for r in rec], "b": rec}, tmp_path / "b.png")
    (fig,) = drawn
    colours = [{line.get_label(): line.get_color() for line in ax.get_lines()} for ax in fig.axes]  # type: ignore[attr-defined]
    assert colours[0]["b"] == colours[1]["b"], colours

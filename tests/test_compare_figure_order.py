"""A one-seed comparison's figures draw every variant in the comparison's order, an unfinished one keeping its slot:
drawn after the finished ones (curves) or left out (accuracy vs bytes), it shifted the colours of the variants after it,
so one variant had two colours between these figures and the HTML report."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("matplotlib")

import chillfl.plots.run as plots_run  # noqa: E402
import chillfl.report.compare as compare  # noqa: E402


def test_an_unfinished_variant_keeps_its_slot_in_every_figure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    drawn: dict[str, list[tuple[str, int]]] = {}

    def capture(name: str) -> Any:
        return lambda curves, path, title="": drawn.setdefault(name, [(label, len(records)) for label, records in curves.items()])

    monkeypatch.setattr(plots_run, "plot_curves", capture("curves"))
    monkeypatch.setattr(compare, "plot_compare_accuracy_vs_bytes", capture("bytes"))
    records = [{"round": 1, "global_acc": 0.5, "bytes_cumulative": 10}]
    outputs: Any = {"A": SimpleNamespace(records=records, summary={}), "C": SimpleNamespace(records=records, summary={})}
    compare.write_compare_figures(outputs, tmp_path, "t", unfinished=["B"], order=["A", "B", "C"])
    assert drawn["curves"] == drawn["bytes"] == [("A", 1), ("B", 0), ("C", 1)]

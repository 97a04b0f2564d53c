"""figvis item 1: one variant, one colour across a comparison's figures (plots.styles.variant_style by the variant's
index in the comparison's own order), checked on the drawn artists, not pixels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")
from matplotlib.colors import to_hex  # noqa: E402

import chillfl.plots.figure as figure_module  # noqa: E402
from chillfl.plots.privacy_utility import plot_privacy_utility  # noqa: E402
from chillfl.plots.styles import variant_style  # noqa: E402


def captured(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures ``save_png`` is handed (still written), so that a test reads their artists."""
    figures: list[Any] = []
    save = figure_module.save_png

    def keep(fig: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        figures.append(fig)
        return save(fig, path, *args, **kwargs)

    monkeypatch.setattr(figure_module, "save_png", keep)
    return figures


def colour(index: int) -> str:
    return to_hex(variant_style(index)[0])


def test_privacy_utility_colours_a_variant_by_its_row_index_as_the_curves_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = captured(monkeypatch)
    rows = [{"variant": "FedAvg", "final_acc": 0.9}, {"variant": "FedAvg, eps=32", "final_acc": 0.8, "epsilon": 32.0},
            {"variant": "failed", "final_acc": None}, {"variant": "DS-FL, eps=32", "final_acc": 0.7, "epsilon": 32.0},
            {"variant": "SCARLET, eps=32", "final_acc": 0.6, "epsilon": 30.0}]
    assert plot_privacy_utility(rows, tmp_path / "pu.png")
    (ax,) = figures[0].axes
    points = {c.get_label(): to_hex(c.lines[0].get_color()) for c in ax.containers}
    assert points == {"FedAvg, eps=32": colour(1), "DS-FL, eps=32": colour(3), "SCARLET, eps=32": colour(4)}
    (reference,) = [line for line in ax.lines if line.get_label().startswith("FedAvg (no DP)")]
    assert to_hex(reference.get_color()) == colour(0)

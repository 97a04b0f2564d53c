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


def test_clp_curves_keep_a_variant_without_a_finished_run_in_its_slot(tmp_path: Path, drawn: list[Any]) -> None:
    import json

    import chillfl.plots.pa3fed as pa3fed
    from test_reportfix2_pa3fed import records

    folder = tmp_path / "cmp"
    folder.mkdir()
    labels = [f"v{i}" for i in range(12)]
    variants = [{"label": label, "short": None, "tune": {}} for label in labels]
    (folder / "sweep.json").write_text(json.dumps({"options": {"seeds": [0], "tune": {}}, "variants": variants}))
    for i, label in enumerate(labels):
        if i != 1:  # v1 diverged: no run folder of it finished
            (folder / label).mkdir()
            (folder / label / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records(0.1 + i / 100)))
    assert pa3fed.main([str(folder)]) == 0
    (ax,) = drawn[-1].axes
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert "v1: no finished run" in lines
    for i, label in enumerate(labels):
        if i != 1:
            want_colour, want_style = variant_style(i)
            assert (to_hex(lines[label].get_color()), lines[label].get_linestyle()) == (to_hex(want_colour), want_style), label

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


def test_the_report_orders_a_comparisons_runs_and_colours_by_its_variant_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sorted by folder name (``FedAvg``, ``chilled_T0.25``, ``exploding_lr``), the page's groups and colours differed
    from the comparison's own figures embedded above them, which follow sweep.json's variant order."""
    import chillfl.report.html as page
    from chillfl.report.html import Group, Run, colour_indices, curves_figure, variant_order

    cmp, other = tmp_path / "cmp", tmp_path / "other"
    labels = {cmp: {"FedAvg": "FedAvg", "NaN_lr": "NaN lr", "exploding_lr": "exploding lr", "chilled_T0.25": "chilled T=0.25"}, other: {}}
    found = [cmp / "FedAvg", cmp / "chilled_T0.25", cmp / "exploding_lr", other / "run"]
    ordered = variant_order(found, labels)
    assert ordered == [cmp / "FedAvg", cmp / "exploding_lr", cmp / "chilled_T0.25", other / "run"]
    records = [{"round": r, "global_acc": 0.1 * r} for r in (1, 2)]
    runs = {p.name: Run(p, None, records, {}, labels[cmp][p.name]) for p in ordered[:3]}  # type: ignore[arg-type]
    groups = [Group(run.variant or "", [run]) for run in runs.values()]
    colours = colour_indices(groups, labels)
    assert colours == [0, 2, 3]  # "NaN lr" (no finished run) keeps its slot, as in the comparison's curves.png
    figures: list[Any] = []
    monkeypatch.setattr(page, "_png", lambda fig: figures.append(fig) or "")
    curves_figure(groups, (("global_acc", "g"),), colours)
    (ax,) = figures[0].axes
    drawn = {line.get_label(): to_hex(line.get_color()) for line in ax.get_lines()}
    assert drawn == {"FedAvg (n=1)": colour(0), "exploding lr (n=1)": colour(2), "chilled T=0.25 (n=1)": colour(3)}
    stray = Run(other / "run", None, records, {}, None)  # type: ignore[arg-type]
    assert colour_indices([*groups, Group("run", [stray])], labels) == [0, 1, 2, 3]  # runs from elsewhere: page order


def test_grad_norms_keep_a_runs_colour_in_both_panels_and_name_an_empty_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from chillfl.analysis.grad_norms import plot_grad_norms

    figures: list[Any] = []
    monkeypatch.setattr(figure_module, "save_figure", lambda fig, path, **kw: figures.append(fig))
    norms = np.array([0.1, 1.0, 10.0, 2.0])
    raw = {"all right": (norms, np.array([True] * 4)), "mixed": (norms, np.array([True, False, True, False])),
           "zeros": (np.zeros(4), np.array([True, False, True, False]))}
    plot_grad_norms(raw, {"all right": 1.0, "mixed": 0.5, "zeros": 1.0}, tmp_path / "g.png")
    top, bottom = figures[0].axes
    for ax in (top, bottom):
        (mixed,) = [p for p in ax.patches if p.get_label().startswith("mixed")]
        assert to_hex(mixed.get_edgecolor()) == colour(1)
    texts = [t.get_text() for t in bottom.get_legend().get_texts()]
    assert "all right (T=1) (no samples)" in texts and "zeros (T=1) (all norms 0)" in texts


def test_cka_draws_each_run_at_its_own_layer_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An MLP's hidden.0 / representation / head were drawn at ticks named after the first run's CNN layers."""
    from chillfl.analysis.cka import plot_cka

    figures: list[Any] = []
    monkeypatch.setattr(figure_module, "save_figure", lambda fig, path, **kw: figures.append(fig))
    cnn = {"features.0": 0.9, "features.3": 0.8, "fc1": 0.7}
    mlp = {"hidden.0": 0.95, "representation": 0.88, "head": float("nan")}
    plot_cka({"runs": {"cnn": {"layers": list(cnn), "global_vs_reference": cnn}, "mlp": {"layers": list(mlp), "global_vs_reference": mlp}}}, tmp_path / "c.png")
    (ax,) = figures[0].axes
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks == ["features.0", "features.3", "fc1", "hidden.0", "representation", "head"]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["cnn"].get_xdata()) == [0, 1, 2]
    mlp_line = lines["mlp (1 of 3 layers undefined: NaN)"]
    assert list(mlp_line.get_xdata()) == [3, 4, 5] and [ticks[x] for x in mlp_line.get_xdata()[:2]] == ["hidden.0", "representation"]

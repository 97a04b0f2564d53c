"""The aggregation figures wrap each run's x label to its run's width. 953ba137 broke labels only after hyphens and
spaces, so a run name of underscores (``fedprox_mu0.01_lr0.05_dirichlet_alpha0.1_seed0``) stayed one line, 3 inches
wide under a 1.4-inch run, over both its neighbours' labels (rev102c #4). A label breaks after ``_``, ``/`` and ``,``
too, and a word longer than a line inside, as textwrap did, outside its numbers where it can."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

pytest.importorskip("matplotlib")

UNDERSCORED = [f"fedprox_mu0.01_lr0.05_dirichlet_alpha0.1_seed{s}" for s in range(3)]
MIXED = ["results/fedprox_mu0.01_lr0.05_dirichlet_alpha0.1_seed0", "fedprox,mu0.01,lr0.05,dirichlet,alpha0.1,seed1",
         "averyveryverylongrunnamewithnoseparatorsatallseed2", "fedprox_mu0.01_lr0.05_seed3"]


def _drawn(plot: Callable[[dict[str, Any], Path], None], labels: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    import chillfl.plots.figure

    saved: list[Any] = []
    real = chillfl.plots.figure.save_figure
    monkeypatch.setattr(chillfl.plots.figure, "save_figure", lambda fig, path, **kw: (saved.append(fig), real(fig, path, **kw))[1])
    clients = [{"delta": 0.1 * (i - 2), "participating": i % 2 == 0} for i in range(5)]
    plot({"runs": {label: {"clients": clients, "before": 1.0, "after": 0.8} for label in labels}}, tmp_path / "f.png")
    (fig,) = saved
    return fig


@pytest.mark.parametrize("labels", [UNDERSCORED, MIXED], ids=["underscores", "mixed"])
@pytest.mark.parametrize("name", ["plot_accuracy_change", "plot_entropy_change"])
def test_run_labels_without_hyphens_are_wrapped_clear_of_their_neighbours(name: str, labels: list[str], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.analysis.aggregation as aggregation

    fig = _drawn(getattr(aggregation, name), labels, tmp_path, monkeypatch)
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    ticks = ax.get_xticklabels()
    assert [t.get_text().replace("\n", "") for t in ticks] == labels  # wrapped, not cut
    boxes = [t.get_window_extent(renderer) for t in ticks]
    assert all(left.x1 < right.x0 for left, right in zip(boxes, boxes[1:])), [(b.x0, b.x1) for b in boxes]  # none over its neighbour's


def test_a_label_breaks_at_its_separators_and_a_long_word_outside_its_numbers() -> None:
    from chillfl.analysis.aggregation import tick_label

    assert tick_label(UNDERSCORED[0]).split("\n") == ["fedprox_mu0.01_", "lr0.05_dirichlet_", "alpha0.1_seed0"]
    assert tick_label("cmp/fedprox,mu0.01,lr0.05,alpha0.1,s0").split("\n") == ["cmp/fedprox,mu0.01,", "lr0.05,alpha0.1,s0"]
    long = tick_label("averyveryverylongrunnamewithnoseparatorsatall").split("\n")
    assert "".join(long) == "averyveryverylongrunnamewithnoseparatorsatall" and len(long) == 3 and max(map(len, long)) <= 20
    assert tick_label("averyveryverylongrunname0.0125").split("\n") == ["averyveryverylongrun", "name0.0125"]  # not "...name0.0" over "125"
    assert tick_label("fedprox-lr1e-05-mu=-1-momentum0.9-seed0").split("\n") == ["fedprox-lr1e-05-", "mu=-1-momentum0.9-", "seed0"]  # 1e-05, -1 whole


def test_a_minus_sign_stays_with_its_number_when_a_word_is_cut() -> None:
    """The cutter split ``-`` from its number where a word longer than a line was broken inside (rev103b)."""
    from chillfl.plots.figure import _packed

    assert _packed("temperaturevalue=-0.125", 20) == ["temperaturevalue=", "-0.125"]

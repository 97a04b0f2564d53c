"""A run or variant name with ``$`` in it (legal) is drawn as written: matplotlib parsed two ``$`` as mathtext, so
``report`` and ``compare`` ended in a mathtext traceback (a comparison left ``.partial`` after its runs trained).
Through the real figure functions, each with the labels and titles a user chooses."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from chillfl.plots.bands import plot_band_curves
from chillfl.plots.communication import plot_compare_accuracy_vs_bytes
from chillfl.plots.differences import plot_differences
from chillfl.plots.pa3fed import plot_compare_clp_seeds
from chillfl.plots.privacy_utility import plot_privacy_utility
from chillfl.plots.run import plot_curves
from chillfl.plots.verdicts import VerdictPoint, plot_verdicts

NAMES = ("lr_$a_b_c$", "$\\frac{a$ b$")
"""A mathtext parse error each (a double subscript; a \\frac without its parts), as a run and a variant name."""


def records(shift: float = 0.0) -> list[dict[str, Any]]:
    return [{"round": r, "global_acc": 0.5 + r / 10 + shift, "local_acc": 0.4 + shift, "global_loss": 1.0 / r, "train_loss": 1.0,
             "bytes_cumulative": 1000 * r, "clp": r == 2, "fgn": 0.1 * r} for r in (1, 2, 3)]


def _stat(per_seed: list[float]) -> dict[str, Any]:
    mean = sum(per_seed) / len(per_seed)
    return {"n": len(per_seed), "mean": mean, "std": 0.0, "ci_low": mean - 0.01, "ci_high": mean + 0.01, "per_seed": per_seed}


def drawn_texts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text of every figure saved, as drawn (read after the draw that raised the mathtext error)."""
    from matplotlib.figure import Figure
    from matplotlib.text import Text

    texts: list[str] = []
    save = Figure.savefig

    def keep(fig: Any, *args: Any, **kwargs: Any) -> Any:
        out = save(fig, *args, **kwargs)
        texts.extend(t._preprocess_math(t.get_text())[0] for t in fig.findobj(Text))  # what the text draws as
        return out

    monkeypatch.setattr(Figure, "savefig", keep)
    return texts


def test_literal_escapes_every_dollar() -> None:
    from chillfl.plots.figure import literal

    assert literal("lr_$a_b_c$") == "lr_\\$a_b_c\\$"
    assert literal("plain") == "plain"


def _curves(tmp_path: Path) -> None:
    plot_curves({NAMES[0]: records(), NAMES[1]: records(0.01)}, tmp_path / "c.png", title=NAMES[0])


def _bands(tmp_path: Path) -> None:
    plot_band_curves({NAMES[0]: [records(), records(0.01)], NAMES[1]: [records()]}, tmp_path / "b.png", title=NAMES[1])


def _bytes(tmp_path: Path) -> None:
    plot_compare_accuracy_vs_bytes({NAMES[0]: records(), NAMES[1]: records(0.01)}, tmp_path / "y.png", title=NAMES[0])


def _clp(tmp_path: Path) -> None:
    plot_compare_clp_seeds({NAMES[0]: [records(), records(0.01)], NAMES[1]: [records()]}, tmp_path / "clp.png", title=NAMES[1])


def _differences(tmp_path: Path) -> None:
    rows = [{"variant": NAMES[1], "delta_acc": _stat([0.0, 0.0])}, {"variant": NAMES[0], "delta_acc": _stat([0.01, 0.012])}]
    assert plot_differences(rows, NAMES[1], tmp_path / "d.png", title=NAMES[0])


def _privacy_utility(tmp_path: Path) -> None:
    rows = [{"variant": NAMES[0], "final_acc": 0.9}, {"variant": NAMES[1], "final_acc": 0.8, "epsilon": 8.0}]
    assert plot_privacy_utility(rows, tmp_path / "p.png", title=NAMES[0], units={NAMES[1]: "x"})


def _verdicts(tmp_path: Path) -> None:
    plot_verdicts([VerdictPoint(NAMES[0], "accuracy", (0.1, 0.2), 0.15, None, "holds")], tmp_path / "v.png", title=NAMES[1])


@pytest.mark.parametrize("draw", [_curves, _bands, _bytes, _clp, _differences, _privacy_utility, _verdicts])
def test_every_figure_draws_a_dollar_name_as_written(draw: Callable[[Path], None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = drawn_texts(monkeypatch)
    draw(tmp_path)
    shown = "\n".join(texts)
    for name in NAMES:
        assert name in shown


def test_the_reports_curves_draw_a_dollar_name_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    import chillfl.report.html as page
    from chillfl.config import RunConfig
    from chillfl.report.html import Group, Run, curves_figure

    figures: list[Any] = []
    real = page._png
    monkeypatch.setattr(page, "_png", lambda fig: figures.append(fig) or real(fig))
    groups = [Group(name, [Run(Path(name), RunConfig(), records(), {})]) for name in NAMES]
    assert curves_figure(groups, (("global_acc", "g"), ("global_loss", "l")))
    (legend,) = figures[0].legends
    shown = [t._preprocess_math(t.get_text())[0] for t in legend.get_texts()]
    assert [s.split(" (n=")[0] for s in shown] == list(NAMES)

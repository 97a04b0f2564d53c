"""``privacy_utility.png``: final accuracy against the epsilon spent, one point per private variant, the others as lines.

The points are read from a comparison's rows (:func:`chillfl.report.compare.build_seed_rows` on hand-made runs, as a
comparison builds them). Worked by hand, seeds 0, 1, 2 (t_{0.975, 2} = 4.3027, sqrt(3) = 1.73205):

* ``plain`` records no epsilon: a reference line at its mean accuracy 90 %.
* ``dp``: final accuracy 0.48, 0.50, 0.52 -> mean 0.50, sample std sqrt((0.02^2 + 0 + 0.02^2) / 2) = 0.02,
  half-width 4.3027 * 0.02 / 1.73205 = 0.049683 -> [45.0317, 54.9683] %. Epsilon at round 2 (the last; round 1's 1.0
  must not count): 7.9, 8.0, 8.1 -> mean 8.0.
* ``local``: accuracy 0.97, 0.99, 1.00 -> mean 0.986667; deviations -0.016667, 0.003333, 0.013333, squares sum
  0.00046667, / 2 = 0.00023333, std 0.015275; half-width 4.3027 * 0.015275 / 1.73205 = 0.037946 -> [94.872, 102.461] %,
  shown [94.872, 100] and marked clipped. Epsilon 0.5 at every seed -> 0.5. 8.0 / 0.5 = 16 > 10: a log axis.
* ``gone`` failed at every seed: no accuracy, neither a point nor a line.
* ``inf``: private (it has a unit) but no finite epsilon recorded: neither (it spent a budget the figure cannot place).
"""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.plots.privacy_utility import UtilityPoint, dodges, note, plot_privacy_utility, utility_points
from chillfl.report.compare import build_rows, build_seed_rows
from chillfl.report.html import _comparison_section
from chillfl.runner import RunOutput
from chillfl.sweeps.plan import Variant

PNG = b"\x89PNG\r\n\x1a\n"
"""The eight bytes every PNG file opens with."""

PLAIN, DP, LOCAL, GONE, INF = (Variant(name, {}) for name in ("plain", "dp", "local", "gone", "inf"))
UNITS = {
    "dp": "dp-fedavg (add_remove neighbours, delta = 1e-05)",
    "local": "local (replace neighbours, delta = 1e-05)",
    "gone": "dp-fedavg (add_remove neighbours, delta = 1e-05)",
    "inf": "dp-fedavg (add_remove neighbours, delta = 1e-05)",
}


def _out(acc: float, eps: list[float | None] | None) -> RunOutput:
    """Two rounds at final accuracy ``acc``; ``eps``: each round's epsilon (None: the run recorded no such key)."""
    records = [{"round": i + 1, "global_acc": acc, **({} if eps is None else {"epsilon": eps[i]})} for i in range(2)]
    return RunOutput(None, records, {"final_global_acc": acc, "best_global_acc": acc, "final_global_loss": 1.0})


def _seed_rows() -> list[dict]:
    runs: dict[tuple[str, int], RunOutput | None] = {}
    for s, (dp_acc, dp_eps, local_acc) in enumerate([(0.48, 7.9, 0.97), (0.50, 8.0, 0.99), (0.52, 8.1, 1.00)]):
        runs[("plain", s)] = _out(0.90, None)
        runs[("dp", s)] = _out(dp_acc, [1.0, dp_eps])
        runs[("local", s)] = _out(local_acc, [0.25, 0.5])
        runs[("gone", s)] = None
        runs[("inf", s)] = _out(0.3, [None, None])
    return build_seed_rows([PLAIN, DP, LOCAL, GONE, INF], runs, [0, 1, 2], PLAIN, PLAIN, None)


def test_points_are_the_private_rows_at_their_last_epsilon_with_the_mean_and_its_interval() -> None:
    utility = utility_points(_seed_rows(), UNITS)
    assert [p.label for p in utility.points] == ["dp", "local"]
    dp, local = utility.points
    assert (dp.epsilon, dp.accuracy, dp.seeds, dp.unit) == (pytest.approx(8.0), pytest.approx(50.0), 3, UNITS["dp"])
    assert dp.interval is not None and (dp.interval.low, dp.interval.high) == (pytest.approx(45.0317, abs=1e-3), pytest.approx(54.9683, abs=1e-3))
    assert not dp.interval.clipped
    assert (local.epsilon, local.accuracy) == (pytest.approx(0.5), pytest.approx(98.6667, abs=1e-3))
    assert local.interval is not None and (local.interval.low, local.interval.high) == (pytest.approx(94.872, abs=1e-3), 100.0)
    assert local.interval.clipped
    assert [(r.label, r.accuracy) for r in utility.references] == [("plain", pytest.approx(90.0))]
    assert utility.log_x  # 8.0 / 0.5 = 16 > 10
    assert utility.units == [UNITS["dp"], UNITS["local"]]


def test_one_seed_rows_have_no_interval_and_a_linear_axis_within_a_factor_of_ten() -> None:
    # one seed: final accuracy 0.6 at epsilon 3.0 (round 2's), 0.4 at 0.5 (6x: linear); the plain run a line at 80 %
    outputs = {"plain": _out(0.8, None), "dp": _out(0.6, [1.0, 3.0]), "local": _out(0.4, [0.2, 0.5])}
    utility = utility_points(build_rows([PLAIN, DP, LOCAL], outputs, PLAIN, PLAIN), {"dp": "a", "local": "a"})
    assert [(p.label, p.epsilon, p.accuracy, p.interval, p.seeds) for p in utility.points] == [("dp", 3.0, pytest.approx(60.0), None, 1), ("local", 0.5, pytest.approx(40.0), None, 1)]
    assert not utility.log_x
    assert note(utility) == "point: mean over 1 seed; no 95 % CI from one seed; lines: variants without DP; every epsilon: a"


def test_the_note_says_epsilons_of_different_markers_do_not_compare() -> None:
    text = note(utility_points(_seed_rows(), UNITS))
    assert text.startswith("point: mean over 3 seeds; bar: 95 % CI (†: clipped to [0, 100] %")
    assert "epsilons of different markers bound different things and do not compare" in text


def test_points_at_one_epsilon_are_drawn_side_by_side() -> None:
    # 8.0 and 8.00001 are one epsilon to 4 significant digits: shifted -3.5 and +3.5 points (7 apart); 2.0 stays put
    points = [UtilityPoint(str(e), e, 50.0, None, 1, "") for e in (8.0, 2.0, 8.00001)]
    assert dodges(points) == [-3.5, 0.0, 3.5]


def test_the_figure_is_a_png_and_is_written_only_when_a_row_spent_a_budget(tmp_path: Path) -> None:
    assert plot_privacy_utility(_seed_rows(), tmp_path / "p.png", title="t", units=UNITS)
    assert (tmp_path / "p.png").read_bytes()[:8] == PNG
    plain = [row for row in _seed_rows() if row["variant"] == "plain"]
    assert not plot_privacy_utility(plain, tmp_path / "none.png") and not (tmp_path / "none.png").exists()


CONFIG = """name = "t"
dataset = { name = "digits" }
model = { name = "mlp", hidden = [16] }
federation = { num_clients = 3, rounds = 2 }
eval = { clients = "none" }
[variants.plain]
"""


@pytest.mark.parametrize(
    ("other", "seeds", "drawn"),
    [
        ('privacy = { mechanism = "dp-fedavg", delta = 1e-3 }', "0,1", True),  # the table over seeds (write_band_figures)
        ('privacy = { mechanism = "dp-fedavg", delta = 1e-3 }', "0", True),  # one seed's table (write_compare_figures)
        ("client = { lr = 0.05 }", "0", False),  # nobody private: no figure
    ],
)
def test_a_comparison_folder_has_the_figure_when_a_variant_is_private(tmp_path: Path, other: str, seeds: str, drawn: bool) -> None:
    config = tmp_path / "t.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n' + CONFIG + f"[variants.other]\n{other}\n", encoding="utf-8")
    assert main(["compare", str(config), "--seeds", seeds, "-q"]) == 0
    folder = tmp_path / "out" / "t-compare"
    assert (folder / "curves.png").is_file()
    figure = folder / "privacy_utility.png"
    assert figure.is_file() is drawn
    if drawn:
        assert figure.read_bytes()[:8] == PNG
    # the HTML report's comparison section shows the folder's own figures as written (bytes embedded), not the curves
    # it redraws from the runs with seed bands
    page = "\n".join(_comparison_section(folder))
    shown = dict(re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page))
    assert "curves" not in shown and ("privacy_utility" in shown) is drawn
    for stem, data in shown.items():
        assert base64.b64decode(data) == (folder / f"{stem}.png").read_bytes()
    assert ("differences" in shown) is (seeds == "0,1")  # the forest plot of paired differences: over seeds only


def test_the_eleventh_variant_is_told_from_the_first() -> None:
    """Colours repeat past ten variants (variant_style) and a point has no line to dash: privacy/epsilon-digits' twelve
    variants drew SCARLET's point and level as FedAvg's (docsfresh). The tens now differ in fill and line style."""
    from chillfl.plots.privacy_utility import point_style

    first, eleventh, twenty_first = point_style(0), point_style(10), point_style(20)
    assert first[0] == eleventh[0] == twenty_first[0]  # the colour every figure gives the variant
    assert len({first[1], eleventh[1], twenty_first[1]}) == 3 and len({first[2], eleventh[2], twenty_first[2]}) == 3
    assert first[1:] == ("full", "--")  # the first ten as before

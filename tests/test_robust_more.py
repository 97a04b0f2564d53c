"""Bulyan, the geometric median (RFA) and centered clipping: rounds worked by hand, an outlier at 1e6 that moves
the mean and not them, their config errors, tiny runs end to end, and centered clipping's state through a resume."""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.aggregation.bulyan import Bulyan, BulyanOptions, bulyan_select, closest_to_median_mean, sizes
from chillfl.aggregation.centered_clip import CenteredClip, CenteredClipOptions
from chillfl.aggregation.geomed import GeoMed, GeoMedOptions, smoothed_weiszfeld
from chillfl.aggregation.registry import algorithm_names, algorithm_spec, make_aggregator
from chillfl.aggregation.robust import ROBUST, Krum, KrumOptions
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment

sys.path.insert(0, str(Path(__file__).parent))
from resume_cases import check_resume  # noqa: E402
from test_robust_aggregators import _results  # noqa: E402  (client i uploads values[i] as entry w, float32, and reports 10 (i + 1) samples)

NEW = ("bulyan", "geomed", "centered_clip")




def _zeros(dim: int) -> dict[str, torch.Tensor]:
    return {"w": torch.zeros(dim)}


# ---------------------------------------------------------------- Bulyan


def test_bulyan_selection_order_and_trim_by_hand() -> None:
    # 7 clients on a line, f = 1, client 6 far away: n = 7 >= 4f + 3; theta = 7 - 2 = 5, beta = 5 - 2 = 3.
    values = [[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [100.0]]
    assert sizes(7, 1) == (5, 3)
    # Krum on R (|R| - f - 2 nearest, squared distances):
    # |R| = 7, 4 nearest: c0 1+4+9+16 = 30, c1 1+1+4+9 = 15, c2 1+1+4+4 = 10, c3 10, c4 15, c5 30, c6 95^2+... -> c2 (tie c3: lower)
    # |R| = 6 {0,1,3,4,5,6}, 3 nearest: c0 1+9+16 = 26, c1 1+4+9 = 14, c3 1+4+4 = 9, c4 1+1+9 = 11, c5 1+4+16 = 21 -> c3
    # |R| = 5 {0,1,4,5,6}, 2 nearest: c0 1+16 = 17, c1 1+9 = 10, c4 1+9 = 10, c5 1+16 = 17 -> c1 (tie c4: lower)
    # |R| = 4 {0,4,5,6}, max(4-3, 1) = 1 nearest: c0 16, c4 1, c5 1, c6 95^2 -> c4 (tie c5: lower)
    # |R| = 3 {0,5,6}, 1 nearest: c0 25, c5 25, c6 95^2 -> c0 (tie c5: lower)
    assert bulyan_select(torch.tensor(values, dtype=torch.float64), 1, 5) == [2, 3, 1, 4, 0]
    # S = {0, 1, 2, 3, 4}: median 2; the 3 closest are 2 (distance 0), 1 and 3 (distance 1): (1 + 2 + 3) / 3 = 2
    agg = Bulyan(BulyanOptions(f=1))
    assert agg.aggregate(_zeros(1), _results(values), 0)["w"].tolist() == [2.0]
    assert agg.round_metrics() == {"selected": [0, 1, 2, 3, 4]}


def test_bulyan_averages_beta_not_all_of_s_around_the_median_not_the_mean() -> None:
    # 7 clients, f = 1 (theta = 5, beta = 3), values 0, 1, 2, 3, 6, 7, 100; Krum on R (squared distances):
    # |R| = 7, 4 nearest: c0 1+4+9+36 = 50, c1 1+1+4+25 = 31, c2 1+1+4+16 = 22, c3 1+4+9+9 = 23, c4 51, c5 78 -> c2
    # |R| = 6 {0,1,3,4,5,6}, 3 nearest: c0 1+9+36 = 46, c1 1+4+25 = 30, c3 4+9+9 = 22, c4 1+9+25 = 35, c5 53 -> c3
    # |R| = 5 {0,1,4,5,6}, 2 nearest: c0 1+36 = 37, c1 1+25 = 26, c4 1+25 = 26, c5 1+36 = 37 -> c1 (tie c4: lower)
    # |R| = 4 {0,4,5,6}, 1 nearest: c0 36, c4 1, c5 1 -> c4;  |R| = 3 {0,5,6}: c0 49, c5 49 -> c0 (tie: lower)
    values = [[0.0], [1.0], [2.0], [3.0], [6.0], [7.0], [100.0]]
    assert bulyan_select(torch.tensor(values, dtype=torch.float64), 1, 5) == [2, 3, 1, 4, 0]
    # S = 0, 1, 2, 3, 6: median 2, the beta = 3 nearest are 2, 1, 3: mean 2 (all five of S would average 12 / 5 = 2.4)
    agg = Bulyan(BulyanOptions(f=1))
    assert agg.aggregate(_zeros(1), _results(values), 0)["w"].tolist() == [2.0]
    assert agg.round_metrics() == {"selected": [0, 1, 2, 3, 4]}
    # nearest the median, not the mean: 0, 1, 2, 3, 100 with beta = 2: median 2 -> 2 and 1 (tie with 3: lower row), 1.5;
    # around the mean 21.2 it would be 3 and 2, 2.5
    assert closest_to_median_mean(torch.tensor([[0.0], [1.0], [2.0], [3.0], [100.0]], dtype=torch.float64), 2).tolist() == [1.5]


def test_bulyan_integer_buffers_take_the_max_over_its_selection() -> None:
    # the clients of test_bulyan_selection_order_and_trim_by_hand: S = clients 0-4 (integer buffers 1-5); clients 5 and 6
    # (6 and 99) are left out, so the max is over S: 5, not 99
    values = [[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [100.0]]
    out = Bulyan(BulyanOptions(f=1)).aggregate(_zeros(1), _results(values, ints=[1, 2, 3, 4, 5, 6, 99]), 0)
    assert out["n"].item() == 5


def test_bulyans_trim_is_per_coordinate_with_ties_to_the_lower_row() -> None:
    # S's rows (client-id order), beta = 2:
    #   coordinate 0: 0, 4, 5, 9 -> median (4 + 5) / 2 = 4.5, distances 4.5, 0.5, 0.5, 4.5 -> rows 1, 2: (4 + 5) / 2 = 4.5
    #   coordinate 1: 7, 1, 3, 2 -> median (2 + 3) / 2 = 2.5, distances 4.5, 1.5, 0.5, 0.5 -> rows 2, 3: (3 + 2) / 2 = 2.5
    #   coordinate 2: 1, 0, 3, 2 -> median 1.5, distances 0.5, 1.5, 1.5, 0.5 -> rows 0, 3: (1 + 2) / 2 = 1.5
    values = torch.tensor([[0.0, 7.0, 1.0], [4.0, 1.0, 0.0], [5.0, 3.0, 3.0], [9.0, 2.0, 2.0]], dtype=torch.float64)
    assert closest_to_median_mean(values, 2).tolist() == [4.5, 2.5, 1.5]
    # beta = 3, coordinate 2: distances 0.5, 1.5, 1.5, 0.5 -> rows 0, 3 and row 1 (tie with row 2: lower): (1 + 2 + 0) / 3 = 1
    assert closest_to_median_mean(values, 3)[2].item() == 1.0


def test_bulyan_trims_the_coordinate_krum_lets_through() -> None:
    """El Mhamdi et al.'s point: a model at the honest mean but far off in one coordinate of 100 has the best Krum
    score (its distance hides the change), so Krum returns it; Bulyan selects it too, then trims that coordinate."""
    gen = torch.Generator().manual_seed(0)
    honest = torch.randn(6, 100, generator=gen)
    attacker = honest.mean(dim=0)
    attacker[0] = 5.0  # honest coordinate 0 lies in [-2.6, 1.5]
    results = _results(torch.cat([honest, attacker[None]]).tolist())
    krum = Krum(KrumOptions(f=1))
    assert krum.aggregate(_zeros(100), results, 0)["w"][0].item() == 5.0 and krum.round_metrics() == {"selected": [6]}
    bulyan = Bulyan(BulyanOptions(f=1))
    out = bulyan.aggregate(_zeros(100), results, 0)["w"]
    assert 6 in bulyan.round_metrics()["selected"]  # type: ignore[operator]
    assert bool(((out >= honest.min(dim=0).values) & (out <= honest.max(dim=0).values)).all())


def test_bulyan_degrades_on_a_round_with_too_few_clients() -> None:
    # f = 2 on a round of 3 (dropouts): theta = clamp(3 - 4, 1, 3) = 1, beta = max(1 - 4, 1) = 1: Krum's choice.
    assert sizes(3, 2) == (1, 1)
    # scores with 1 neighbour: c0 |0-1|^2 = 1, c1 1, c2 |1-10|^2 = 81 -> c0 (tie: lower)
    agg = Bulyan(BulyanOptions(f=2))
    assert agg.aggregate(_zeros(1), _results([[0.0], [1.0], [10.0]]), 0)["w"].tolist() == [0.0]
    assert agg.round_metrics() == {"selected": [0]}
    # one client: itself
    assert Bulyan(BulyanOptions(f=1)).aggregate(_zeros(1), _results([[7.0]]), 0)["w"].tolist() == [7.0]


def test_bulyan_with_f_0_is_the_plain_mean_and_integers_take_the_max() -> None:
    out = Bulyan().aggregate(_zeros(1), _results([[1.0], [2.0], [6.0]], ints=[3, 9, 5]), 0)
    assert out["w"].tolist() == [3.0] and out["w"].dtype == torch.float32  # theta = beta = 3: (1 + 2 + 6) / 3
    assert out["n"].item() == 9 and list(out) == ["w", "n"]


# ---------------------------------------------------------------- geometric median (RFA)


def test_geomed_one_weiszfeld_step_by_hand() -> None:
    # points 0, 1, 10, uniform alpha = 1/3: v0 = 11/3 (the mean); distances 11/3, 8/3, 19/3;
    # beta = (1/3) / distance = 1/11, 1/8, 1/19; v1 = (1/8 + 10/19) / (1/11 + 1/8 + 1/19) = (99/152) / (449/1672) = 1089/449 = 2.4254
    results = _results([[0.0], [1.0], [10.0]])
    one = GeoMed(GeoMedOptions(iterations=1, weighting="uniform"))
    v1 = one.aggregate(_zeros(1), results, 0)["w"].item()
    assert v1 == pytest.approx(1089 / 449, rel=1e-6)
    assert 1.0 < v1 < 11 / 3  # from the mean toward the median (1), away from the outlier (10)
    # objective at v1: (1/3)(1089 + 640 + 3401) / 449 = 1710/449 = 3.808 < 38/9 = 4.222 at the mean
    assert one.round_metrics()["objective"] == pytest.approx(1710 / 449, rel=1e-6)
    assert one.round_metrics()["steps"] == 1  # the cap: the objective fell by 44/405 of itself, far above ftol = 1e-6
    # more steps: closer to the geometric median of 0, 1, 10, which is 1
    v3 = GeoMed(GeoMedOptions(iterations=3, weighting="uniform")).aggregate(_zeros(1), results, 0)["w"].item()
    assert 1.0 < v3 < v1


def test_geomed_weights_by_samples_by_default() -> None:
    # points 10, 0, 3, 1 with samples 10, 20, 30, 40 -> alpha = 0.1, 0.2, 0.3, 0.4 (weighted median: 1)
    results = _results([[10.0], [0.0], [3.0], [1.0]])
    # the start: the weighted mean 0.1 * 10 + 0 + 0.3 * 3 + 0.4 * 1 = 2.3
    # one step: distances 7.7, 2.3, 0.7, 1.3; beta = 0.1/7.7, 0.2/2.3, 0.3/0.7, 0.4/1.3 = 1/77, 2/23, 3/7, 4/13
    # v1 = (10/77 + 0 + 9/7 + 4/13) / (1/77 + 2/23 + 3/7 + 4/13) = 2.0608: from 2.3 toward 1
    expected = (10 / 77 + 9 / 7 + 4 / 13) / (1 / 77 + 2 / 23 + 3 / 7 + 4 / 13)
    assert GeoMed(GeoMedOptions(iterations=1)).aggregate(_zeros(1), results, 0)["w"].item() == pytest.approx(expected, rel=1e-6)
    # uniform alpha: the mean 14/4 = 3.5 to start, not 2.3; distances 6.5, 3.5, 0.5, 2.5, beta = (1/4) / distance:
    # v1 = (10/6.5 + 0 + 3/0.5 + 1/2.5) / (1/6.5 + 1/3.5 + 1/0.5 + 1/2.5) = 2.8385
    uniform = (10 / 6.5 + 3 / 0.5 + 1 / 2.5) / (1 / 6.5 + 1 / 3.5 + 1 / 0.5 + 1 / 2.5)
    assert GeoMed(GeoMedOptions(iterations=1, weighting="uniform")).aggregate(_zeros(1), results, 0)["w"].item() == pytest.approx(uniform, rel=1e-6)


def test_geomed_stops_on_the_objectives_relative_change_by_hand() -> None:
    # points 0, 1, 10, uniform alpha = 1/3. For v in [1, 10] the objective is f(v) = (v + (v - 1) + (10 - v)) / 3 = (v + 9) / 3,
    # so the relative change of step l is (v_{l-1} - v_l) / (v_l + 9). The iterates (exact fractions, test above):
    #   v0 = 11/3, v1 = 1089/449 (beta = 1/11, 1/8, 1/19), v2 = (1/640 + 10/3401) / (1/1089 + 1/640 + 1/3401)
    #   = 10673289/6577289 = 1.62275 (distances at v1: 1089/449, 640/449, 3401/449), v3 = 1.19565
    # step 1: (11/3 - 1089/449) / (1089/449 + 9) = (1672/1347) / (5130/449) = 44/405 = 0.1086
    # step 2: (1089/449 - 1.62275) / 10.62275 = 0.0756;  step 3: (1.62275 - 1.19565) / 10.19565 = 0.0419
    results = _results([[0.0], [1.0], [10.0]])
    v2 = 10673289 / 6577289
    for ftol, steps in [(0.2, 1), (0.1, 2), (0.05, 3), (0.0, 5)]:  # 0.1086 >= 0.1 runs on; 0.0756 < 0.1 stops; ftol = 0: the cap
        agg = GeoMed(GeoMedOptions(iterations=5, ftol=ftol, weighting="uniform"))
        out = agg.aggregate(_zeros(1), results, 0)["w"]
        fixed = GeoMed(GeoMedOptions(iterations=steps, ftol=0.0, weighting="uniform")).aggregate(_zeros(1), results, 0)["w"]
        assert torch.equal(out, fixed) and agg.round_metrics()["steps"] == steps  # stopped after `steps`, at that step's estimate
        assert agg.round_metrics()["objective"] == pytest.approx((out.item() + 9) / 3, rel=1e-6)
    agg = GeoMed(GeoMedOptions(iterations=5, ftol=0.1, weighting="uniform"))
    assert agg.aggregate(_zeros(1), results, 0)["w"].item() == pytest.approx(v2, rel=1e-6)
    # the change is relative: the same points scaled by 1000 stop after the same 2 steps, at 1000 v2
    assert agg.aggregate(_zeros(1), _results([[0.0], [1000.0], [10000.0]]), 0)["w"].item() == pytest.approx(1000 * v2, rel=1e-6)
    assert agg.round_metrics()["steps"] == 2
    # the cap wins over ftol: at most `iterations` steps
    capped = GeoMed(GeoMedOptions(iterations=1, ftol=0.05, weighting="uniform"))
    assert capped.aggregate(_zeros(1), results, 0)["w"].item() == pytest.approx(1089 / 449, rel=1e-6) and capped.round_metrics()["steps"] == 1


def test_geomed_stops_at_once_when_every_model_is_the_same_point() -> None:
    # f = 0 after the first step: no further step can move v (a relative change of 0 / 0 would never stop)
    agg = GeoMed()
    assert agg.aggregate(_zeros(2), _results([[1.5, -2.0]] * 3), 0)["w"].tolist() == [1.5, -2.0]
    assert agg.round_metrics() == {"objective": 0.0, "steps": 1}


def test_geomed_distances_span_every_float_entry_and_integers_take_the_max() -> None:
    # two entries as one vector: client points (0, 0), (3, 4), (0, 8) in (a, b); uniform, v0 = (1, 4);
    # distances sqrt(1 + 16) = sqrt 17, sqrt(4 + 0) = 2, sqrt(1 + 16) = sqrt 17 -> beta = (1/3)/sqrt17, 1/6, (1/3)/sqrt17
    results = [ClientResult(i, {"a": torch.tensor([a]), "b": torch.tensor([b]), "n": torch.tensor(k)}, 1, 1, 0.1, 1.0, 0.0)
               for i, (a, b, k) in enumerate([(0.0, 0.0, 4), (3.0, 4.0, 2), (0.0, 8.0, 7)])]
    out = GeoMed(GeoMedOptions(iterations=1, weighting="uniform")).aggregate({}, results, 0)
    s = 1 / (3 * math.sqrt(17))
    total = 2 * s + 1 / 6
    assert out["a"].item() == pytest.approx((3 / 6) / total, rel=1e-6)  # (s * 0 + (1/6) 3 + s * 0) / total
    assert out["b"].item() == pytest.approx((4 / 6 + 8 * s) / total, rel=1e-6)
    assert out["n"].item() == 7 and list(out) == ["a", "b", "n"]


# ---------------------------------------------------------------- centered clipping


def test_centered_clip_by_hand_and_its_previous_start_across_two_rounds() -> None:
    agg = CenteredClip(CenteredClipOptions(tau=1.0))
    # round 1, w = (0, 0), v0 = 0: d - v = (3, 4) norm 5 -> x 1/5 = (0.6, 0.8); (0, 0.5) norm 0.5 -> as is;
    # (0, -1) norm 1 -> min(1, 1/1) = 1, as is. v = ((0.6, 0.8) + (0, 0.5) + (0, -1)) / 3 = (0.2, 0.1) (the mean would be (1, 7/6))
    w1 = agg.aggregate(_zeros(2), _results([[3.0, 4.0], [0.0, 0.5], [0.0, -1.0]]), 0)["w"]
    assert w1.tolist() == pytest.approx([0.2, 0.1], abs=1e-7)
    assert agg.state_dict()["v"]["w"].tolist() == pytest.approx([0.2, 0.1], abs=1e-7)
    # round 2, w = w1, v0 = (0.2, 0.1) (the last aggregate); clients at d - v0 = (0, 2), (0.3, -0.4), (-6, -8):
    # norms 2, 0.5, 10 -> scales 1/2, 1, 1/10 -> (0, 1) + (0.3, -0.4) + (-0.6, -0.8) = (-0.3, -0.2); / 3 = (-0.1, -1/15)
    # v = (0.2, 0.1) + (-0.1, -1/15) = (0.1, 1/30); next = w1 + v = (0.3, 0.1 + 1/30)
    diffs = [[0.0, 2.0], [0.3, -0.4], [-6.0, -8.0]]
    round2 = [[w1[j].item() + 0.2 * (j == 0) + 0.1 * (j == 1) + d[j] for j in range(2)] for d in diffs]
    w2 = agg.aggregate({"w": w1}, _results(round2), 1)["w"]
    assert w2.tolist() == pytest.approx([0.3, 0.1 + 1 / 30], abs=1e-6)
    assert agg.state_dict()["v"]["w"].tolist() == pytest.approx([0.1, 1 / 30], abs=1e-7)  # the aggregate v, not v - v0
    # start = "zero" ignores round 1: round 2 from v0 = 0 is what a fresh aggregator does, not the above
    zero = CenteredClip(CenteredClipOptions(tau=1.0, start="zero"))
    zero.aggregate(_zeros(2), _results([[3.0, 4.0], [0.0, 0.5], [0.0, -1.0]]), 0)
    fresh = CenteredClip(CenteredClipOptions(tau=1.0)).aggregate({"w": w1}, _results(round2), 1)["w"]
    from_zero = zero.aggregate({"w": w1}, _results(round2), 1)["w"]
    assert torch.equal(from_zero, fresh) and not torch.allclose(from_zero, w2)


def test_centered_clip_iterations_repeat_the_step() -> None:
    # 1-D, w = 0, updates 0, 0, 3, tau = 1, v0 = 0:
    # step 1: |0|, |0| unclipped (zero distance counts as unclipped), 3 -> 1: v = (0 + 0 + 1) / 3 = 1/3
    # step 2: d - v = -1/3, -1/3, 8/3 -> 8/3 clipped to 1: v = 1/3 + (-1/3 - 1/3 + 1) / 3 = 1/3 + 1/9 = 4/9
    results = _results([[0.0], [0.0], [3.0]])
    one = CenteredClip(CenteredClipOptions(tau=1.0)).aggregate(_zeros(1), results, 0)["w"].item()
    two = CenteredClip(CenteredClipOptions(tau=1.0, iterations=2)).aggregate(_zeros(1), results, 0)["w"].item()
    assert (one, two) == (pytest.approx(1 / 3), pytest.approx(4 / 9))


def test_centered_clip_state_resumes_bitwise(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(0)
    rounds = [_results((3 * torch.randn(5, 3, generator=gen)).tolist(), ints=[1, 2, 3, 4, 5]) for _ in range(4)]
    original, restored = CenteredClip(CenteredClipOptions(tau=0.5)), CenteredClip(CenteredClipOptions(tau=0.5))
    global_params = {"w": torch.zeros(3), "n": torch.tensor(0)}
    for r, results in enumerate(rounds[:2]):
        global_params = original.aggregate(global_params, results, r)
    torch.save(original.state_dict(), tmp_path / "agg.pt")
    restored.load_state_dict(torch.load(tmp_path / "agg.pt", weights_only=True))
    for r, results in enumerate(rounds[2:], start=2):
        a, b = original.aggregate(global_params, results, r), restored.aggregate(global_params, results, r)
        assert torch.equal(a["w"], b["w"]) and torch.equal(original.state_dict()["v"]["w"], restored.state_dict()["v"]["w"])
        global_params = a
    # a fresh aggregator (v = 0) differs: the state matters
    assert not torch.equal(CenteredClip(CenteredClipOptions(tau=0.5)).aggregate(global_params, rounds[3], 3)["w"], a["w"])
    with pytest.raises(ValueError):
        restored.load_state_dict({})
    for stateless in (Bulyan(), GeoMed()):
        assert stateless.state_dict() == {}


# ---------------------------------------------------------------- an outlier at 1e6


OUTLIER = [[1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [1e6]]
"""Six honest clients in [1, 6] and one at 1e6: the mean is (21 + 1e6) / 7 = 142860."""


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: Bulyan(BulyanOptions(f=1)), id="bulyan"),
        # RFA starts at the weighted mean (250003) and each step divides a far outlier's pull by a few; the default
        # stopping rule runs 13 steps, to 5.7 (test_geomed_default_stops_in_the_honest_range_...)
        pytest.param(lambda: GeoMed(), id="geomed"),
        pytest.param(lambda: CenteredClip(), id="centered_clip"),  # tau = 10: (21 + 10) / 7 = 4.43
    ],
)
def test_an_outlier_at_1e6_moves_the_mean_not_the_rule(make: Any) -> None:
    results = _results(OUTLIER)
    assert FedAvg("uniform").aggregate(_zeros(1), results, 0)["w"].item() == pytest.approx((21 + 1e6) / 7)
    out = make().aggregate(_zeros(1), results, 0)["w"].item()
    assert 1.0 <= out <= 6.0


def test_centered_clip_and_bulyan_values_on_the_outlier_by_hand() -> None:
    # centered clipping from w = 0, v0 = 0, tau = 10: 1..6 unclipped, 1e6 -> 10: (21 + 10) / 7
    assert CenteredClip().aggregate(_zeros(1), _results(OUTLIER), 0)["w"].item() == pytest.approx(31 / 7)
    # Bulyan f = 1 selects 5 of the 6 honest (never 1e6); the 3 nearest the median of S average to within [1, 6]
    agg = Bulyan(BulyanOptions(f=1))
    agg.aggregate(_zeros(1), _results(OUTLIER), 0)
    assert 6 not in agg.round_metrics()["selected"]  # type: ignore[operator]


def test_weiszfeld_smooths_with_max_nu_distance_where_v_meets_a_client() -> None:
    # points -1, 0, 2 with alpha (0.5, 0.25, 0.25): v_0 = (-0.5 + 0 + 0.5) / 1 = 0, on client 1; distances 1, 0, 2
    # beta = 0.5 / max(nu, 1), 0.25 / max(nu, 0), 0.25 / max(nu, 2) = 0.5, 0.25e6, 0.125 (nu = 1e-6)
    # v_1 = (-0.5 + 0 + 0.25) / (0.625 + 250000) = -0.25 / 250000.625   (0.25 / (d + nu) would give -9.99996e-7)
    points = torch.tensor([[-1.0], [0.0], [2.0]], dtype=torch.float64)
    found = smoothed_weiszfeld(points, torch.tensor([0.5, 0.25, 0.25], dtype=torch.float64), 1, 1e-6)
    assert found.v.item() == pytest.approx(-0.25 / 250000.625, rel=1e-9)
    assert found.steps == 1


def test_weiszfeld_objective_is_the_l2_distance_and_ftol_0_runs_every_step() -> None:
    # (0, 0) and (3, 4), alpha 1/2 each: v_0 = (1.5, 2), each at L2 distance 2.5 (L1 would be 3.5); the step keeps v
    # (equal betas), so f stays 0.5 * 2.5 + 0.5 * 2.5 = 2.5: a zero change, which ftol = 0 does not count as a stop
    points = torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=torch.float64)
    found = smoothed_weiszfeld(points, torch.tensor([0.5, 0.5], dtype=torch.float64), 3, 1e-6, 0.0)
    assert found.v.tolist() == pytest.approx([1.5, 2.0]) and found.objective == pytest.approx(2.5) and found.steps == 3
    # with ftol > 0 the same zero change stops after the first step
    assert smoothed_weiszfeld(points, torch.tensor([0.5, 0.5], dtype=torch.float64), 3, 1e-6, 1e-6).steps == 1


def test_geomed_default_stops_in_the_honest_range_where_a_few_fixed_steps_do_not() -> None:
    """RFA starts at the weighted mean (the outlier reports 70 of 280 samples: 250003) and each smoothed Weiszfeld step
    divides a far outlier's pull by a few. The objective, about 0.25e6, is dominated by the outlier's distance, so its
    relative change stays above ftol = 1e-6 until v nears the honest clients: step 12 changes it by 1.04e-6 (v = 5.74),
    step 13 by 1.7e-8 (v = 5.68), where the default stops. A fixed 3 steps (chillfl's former default) end near 1.2e4,
    RFA's code's cap of 4 near 4.1e3."""
    default = GeoMed()
    v = default.aggregate(_zeros(1), _results(OUTLIER), 0)["w"].item()
    assert 1.0 <= v <= 6.0 and v == pytest.approx(5.6835, abs=1e-3)
    assert default.round_metrics()["steps"] == 13
    three = GeoMed(GeoMedOptions(iterations=3, ftol=0.0))
    assert three.aggregate(_zeros(1), _results(OUTLIER), 0)["w"].item() == pytest.approx(12199.4, rel=1e-5)
    four = GeoMed(GeoMedOptions(iterations=4))
    assert four.aggregate(_zeros(1), _results(OUTLIER), 0)["w"].item() == pytest.approx(4102.7, rel=1e-5)
    assert four.round_metrics()["steps"] == 4  # the cap stopped it, not ftol
    assert three.round_metrics()["objective"] > four.round_metrics()["objective"] > default.round_metrics()["objective"]


# ---------------------------------------------------------------- registry and config errors


def test_registered_robust_and_listed() -> None:
    assert set(NEW) <= set(algorithm_names())
    for name in NEW:
        assert algorithm_spec(name).capabilities == ROBUST


def _config(**overrides: Any) -> Any:
    return load_config(None, {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 10, **overrides})


@pytest.mark.parametrize("clients,f", [(6, 1), (10, 2), (2, 0)])
def test_bulyan_needs_4f_plus_3_clients_per_round(clients: int, f: int) -> None:
    cfg = _config(**{"federation.clients_per_round": clients, "algorithm": {"name": "bulyan", "f": f}})
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg)
    assert err.value.field == "algorithm.f" and "4f + 3" in err.value.message


def test_bulyan_at_exactly_4f_plus_3_clients_builds() -> None:
    build_experiment(_config(**{"federation.clients_per_round": 7, "algorithm": {"name": "bulyan", "f": 1}}))


@pytest.mark.parametrize(
    "name,options,field",
    [
        ("bulyan", {"f": -1}, "algorithm.f"),
        ("geomed", {"iterations": -1}, "algorithm.iterations"),
        ("geomed", {"iterations": 0}, "algorithm.iterations"),
        ("geomed", {"ftol": -1e-9}, "algorithm.ftol"),
        ("geomed", {"ftol": float("inf")}, "algorithm.ftol"),
        ("geomed", {"ftol": float("nan")}, "algorithm.ftol"),
        ("geomed", {"nu": 0.0}, "algorithm.nu"),
        ("geomed", {"weighting": "median"}, "algorithm.weighting"),
        ("centered_clip", {"tau": 0.0}, "algorithm.tau"),
        ("centered_clip", {"tau": -1.0}, "algorithm.tau"),
        ("centered_clip", {"iterations": 0}, "algorithm.iterations"),
        ("centered_clip", {"start": "middle"}, "algorithm.start"),
        ("krum", {"selection": "twice"}, "algorithm.selection"),
    ],
)
def test_bad_option_values_name_their_field(name: str, options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_aggregator(name, options, num_clients=10, model=torch.nn.Linear(2, 2), seed=0)
    assert err.value.field == field


@pytest.mark.parametrize(("options", "line"), [
    ({"ftol": -0.5}, "algorithm.ftol: must be >= 0 and finite (0: always run `iterations` steps), got -0.5"),
    ({"iterations": 0}, "algorithm.iterations: must be in [1, 10000] (the most Weiszfeld steps a round runs; the weighted mean is fedavg), got 0"),
])
def test_geomeds_bad_cap_or_tolerance_is_one_line_from_the_config(options: dict[str, Any], line: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_experiment(_config(algorithm={"name": "geomed", **options}))
    assert str(err.value) == line
    build_experiment(_config(algorithm={"name": "geomed", "iterations": 1, "ftol": 0}))  # the edges are allowed (ftol = 0: a fixed count)


# ---------------------------------------------------------------- end to end


def _run(algorithm: dict[str, Any]) -> list[dict[str, Any]]:
    overrides = {
        "seed": 1, "dataset.name": "digits", "model.name": "mlp", "model.hidden": [16], "federation.num_clients": 7,
        "federation.clients_per_round": 7, "federation.rounds": 2, "client.batch_size": 32, "client.lr": 0.05,
        "eval.client_split_size": 20, "algorithm": algorithm,
    }
    return run_experiment(load_config(None, overrides), write=False, progress=False).records


@pytest.mark.parametrize("algorithm", [{"name": "bulyan", "f": 1}, {"name": "geomed"}, {"name": "centered_clip", "tau": 0.25}])  # tau below the updates' 0.2-0.6: clipping active
def test_end_to_end(algorithm: dict[str, Any]) -> None:
    records = _run(algorithm)
    assert [r["round"] for r in records] == [1, 2]
    assert all(math.isfinite(r["global_acc"]) and 0.0 <= r["global_acc"] <= 1.0 for r in records)
    if algorithm["name"] == "bulyan":  # theta = 7 - 2 = 5 selected a round
        assert all(len(r["agg_selected"]) == 5 and set(r["agg_selected"]) <= set(r["clients"]) for r in records)
    if algorithm["name"] == "geomed":
        assert all(math.isfinite(r["agg_objective"]) and r["agg_objective"] > 0 and 1 <= r["agg_steps"] <= 100 for r in records)


def test_centered_clip_run_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run stopped after round 1 and resumed (v through the checkpoint) is the uninterrupted run, byte for byte."""
    check_resume("algorithm.centered_clip", "sequential", 1, tmp_path, monkeypatch)  # tau as resume_cases.NEEDS: clipping active


SMALL: dict[str, Any] = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 10, "federation.rounds": 1, "eval.clients": "none"}
SCALING = {"attack.kind": "scaling", "attack.fraction": 0.2}  # round(0.2 * 10) = 2 attackers


def _notes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "chillfl.experiment" and r.getMessage().startswith("note:")]


@pytest.mark.parametrize("name", ["krum", "dnc"])  # Bulyan takes f <= 1 of 10 clients a round: test_the_suggested_f_is_one_the_rule_accepts
def test_a_robust_rule_at_f_0_under_attack_says_it_tolerates_no_one(name: str, caplog: pytest.LogCaptureFixture) -> None:
    """Krum and DnC at their default f = 0 in an attacked run defended against no one, without a word."""
    from chillfl import once
    from chillfl.experiment import fewer_attackers_note, say_notes

    with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
        for quiet in ({"algorithm.f": 2}, {"algorithm.f": 3}, {}):  # f >= the 2 attackers; no [attack]
            once.forget()
            say_notes([fewer_attackers_note(load_config(None, {**SMALL, "algorithm.name": name, **quiet, **(SCALING if quiet else {})}))])
        assert _notes(caplog) == []
        once.forget()
        say_notes([fewer_attackers_note(load_config(None, {**SMALL, "algorithm.name": name, **SCALING}))])
    assert _notes(caplog) == [f"note: algorithm.f = 0: {name} tolerates no attacker, and this run has 2 of 10 clients attacking; set algorithm.f = 2"]


def test_the_f_0_note_comes_once_the_run_is_built(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Said by the runner (after every check passed), not by a test calling the function: a whole run prints it once."""
    from chillfl import once

    once.forget()
    with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
        run_experiment(load_config(None, {**SMALL, "algorithm.name": "krum", **SCALING, "out_dir": str(tmp_path)}), write=False, progress=False)
    assert _notes(caplog) == ["note: algorithm.f = 0: krum tolerates no attacker, and this run has 2 of 10 clients attacking; set algorithm.f = 2"]


def _note(overrides: dict[str, Any], caplog: pytest.LogCaptureFixture) -> list[str]:
    """The notes :func:`~chillfl.experiment.fewer_attackers_note` says for the small run with ``overrides``."""
    from chillfl import once
    from chillfl.experiment import fewer_attackers_note, say_notes

    once.forget()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="chillfl.experiment"):
        say_notes([fewer_attackers_note(load_config(None, {**SMALL, **overrides}))])
    return _notes(caplog)


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        # Bulyan needs n >= 4f + 3: with n = 10 clients a round, f <= floor(7 / 4) = 1 (f = 2 needs 11), short of the 2 attackers
        ({"algorithm.name": "bulyan", **SCALING}, "note: algorithm.f = 0: bulyan tolerates no attacker, and this run has 2 of 10 clients attacking; "
                                                  "set algorithm.f = 1, the largest bulyan accepts here (10 clients per round): none it accepts covers all 2"),
        # Krum needs n > 2f + 2: f <= floor((10 - 3) / 2) = 3, short of round(0.4 * 10) = 4 attackers
        ({"algorithm.name": "krum", "attack.kind": "scaling", "attack.fraction": 0.4},
         "note: algorithm.f = 0: krum tolerates no attacker, and this run has 4 of 10 clients attacking; "
         "set algorithm.f = 3, the largest krum accepts here (10 clients per round): none it accepts covers all 4"),
        # Multi-Krum's m <= n - f too: m = 9 leaves f <= 1 (f = 2: 9 > 10 - 2), though n > 2f + 2 allows 3: the whole check is asked
        ({"algorithm.name": "krum", "algorithm.m": 9, **SCALING}, "note: algorithm.f = 0: krum tolerates no attacker, and this run has 2 of 10 clients attacking; "
                                                                 "set algorithm.f = 1, the largest krum accepts here (10 clients per round): none it accepts covers all 2"),
        # 3 clients a round: Bulyan takes f = 0 only (4 * 1 + 3 = 7 > 3)
        ({"algorithm.name": "bulyan", "federation.clients_per_round": 3, **SCALING},
         "note: algorithm.f = 0: bulyan tolerates no attacker, and this run has 2 of 10 clients attacking; "
         "bulyan accepts no larger algorithm.f here (3 clients per round): none covers all 2"),
    ],
)
def test_the_suggested_f_is_one_the_rule_accepts(overrides: dict[str, Any], said: str, caplog: pytest.LogCaptureFixture) -> None:
    """The note suggested f = the number of attackers, which Bulyan (n >= 4f + 3) and Krum (n > 2f + 2, m <= n - f) refuse
    when the round is too small: the suggestion is now the largest f the rule's own check accepts, and says when none covers all."""
    assert _note(overrides, caplog) == [said]


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        # f = 1 < 2 attackers; Krum takes f = 2 of 10 a round (10 > 2 * 2 + 2)
        ({"algorithm.name": "krum", "algorithm.f": 1, **SCALING},
         "note: algorithm.f = 1: krum tolerates 1 attacker, and this run has 2 of 10 clients attacking; set algorithm.f = 2"),
        # f = 2 < 4 attackers; Krum takes up to f = 3 of 10 (10 > 8), not 4 (10 > 10 fails)
        ({"algorithm.name": "krum", "algorithm.f": 2, "attack.kind": "scaling", "attack.fraction": 0.4},
         "note: algorithm.f = 2: krum tolerates 2 attackers, and this run has 4 of 10 clients attacking; "
         "set algorithm.f = 3, the largest krum accepts here (10 clients per round): none it accepts covers all 4"),
        # f = 1 is already Bulyan's largest of 10 a round (4 * 2 + 3 = 11 > 10)
        ({"algorithm.name": "bulyan", "algorithm.f": 1, **SCALING},
         "note: algorithm.f = 1: bulyan tolerates 1 attacker, and this run has 2 of 10 clients attacking; "
         "bulyan accepts no larger algorithm.f here (10 clients per round): none covers all 2"),
        # DnC removes floor(c f) = floor(1.0 * 1) = 1 a round: f = 2 removes 2 and leaves 8
        ({"algorithm.name": "dnc", "algorithm.f": 1, **SCALING},
         "note: algorithm.f = 1: dnc tolerates 1 attacker, and this run has 2 of 10 clients attacking; set algorithm.f = 2"),
        ({"algorithm.name": "krum", "algorithm.f": 2, **SCALING}, None),  # f = the attackers: nothing to say
        ({"algorithm.name": "krum", "algorithm.f": 1}, None),  # no [attack]
    ],
)
def test_a_robust_rule_below_the_attackers_says_so(overrides: dict[str, Any], said: str | None, caplog: pytest.LogCaptureFixture) -> None:
    """0 < f < the number of attackers said nothing: the rule withstood fewer clients than attack, without a word."""
    assert _note(overrides, caplog) == ([] if said is None else [said])


def test_the_note_counts_the_attackers_a_round_can_hold(caplog: pytest.LogCaptureFixture) -> None:
    """The rule's f counts one round's attackers: with 10 of 20 clients attacking and 8 sampled a round, a round holds
    at most 8, so the note compares f with 8 (it said "covers all 10", a number no round reaches)."""
    # round(0.5 * 20) = 10 attackers; Krum needs n > 2f + 2 with n = 8 a round: f = 2 (8 > 6), not 3 (8 > 8 fails)
    run = {"federation.num_clients": 20, "federation.clients_per_round": 8, "attack.kind": "scaling", "attack.fraction": 0.5}
    assert _note({"algorithm.name": "krum", **run}, caplog) == [
        "note: algorithm.f = 0: krum tolerates no attacker, and this run has 10 of 20 clients attacking, at most 8 in a round of 8; "
        "set algorithm.f = 2, the largest krum accepts here (8 clients per round): none it accepts covers all 8"]
    # 2 attackers (round(0.1 * 20)) fit in a round of 8: the run's count, as before, with no "at most"
    two = {**run, "attack.fraction": 0.1}
    assert _note({"algorithm.name": "krum", **two}, caplog) == [
        "note: algorithm.f = 0: krum tolerates no attacker, and this run has 2 of 20 clients attacking; set algorithm.f = 2"]


def test_a_dry_run_says_the_notes_the_run_would(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--dry-run` said none of the notes a built run says (only the ignored client_fraction), so a config checked with
    it hid Krum's f below its attackers. A comparison's dry run says each run's, after every run is checked: a bad
    later run still ends in its one error line, with no note before it."""
    from chillfl import once
    from chillfl.cli import main

    config = tmp_path / "krum.toml"
    config.write_text('[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 10\nrounds = 1\n'
                      '[eval]\nclients = "none"\n[algorithm]\nname = "krum"\n[attack]\nkind = "scaling"\nfraction = 0.2\n')
    said = "note: algorithm.f = 0: {} tolerates no attacker, and this run has 2 of 10 clients attacking; set algorithm.f = 2"
    once.forget()
    assert main(["run", str(config), "--dry-run"]) == 0
    assert said.format("krum") in capsys.readouterr().err
    once.forget()
    assert main(["compare", str(config), "--grid", "algorithm.name=krum,dnc", "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert said.format("krum") in err and said.format("dnc") in err
    once.forget()
    assert main(["compare", str(config), "--grid", "algorithm.f=0,99", "--dry-run"]) == 2
    err_lines = capsys.readouterr().err.strip().splitlines()
    assert len(err_lines) == 1 and "algorithm.f" in err_lines[0] and "note:" not in err_lines[0], err_lines

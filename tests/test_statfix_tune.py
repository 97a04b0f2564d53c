"""Choosing a tuning point: ties up to float rounding, and points whose finished runs scored NaN.

Hand-worked numbers; every test here failed before its fix (statfix F1, F4)."""

from __future__ import annotations

import math

from chillfl.tune import TIE_TOLERANCE, point_scores, select_point


def _records(correct: tuple[int, ...], n: int = 72) -> list[list[dict[str, float]]]:
    """One point's runs, one per seed: a final validation accuracy of ``correct[s]`` out of ``n`` rows at seed s."""
    return [[{"round": 1, "val_acc": k / n}] for k in correct]


def test_an_exact_tie_up_to_rounding_goes_to_the_earlier_point() -> None:
    # 55 + 55 + 57 = 55 + 56 + 56 = 167 correct of 3 x 72: the same mean, 0.773148..., summed from other floats
    # (0.773148148148148 against 0.7731481481481483): a bare max gave the tie to the later point
    scores = point_scores([_records((55, 55, 57)), _records((55, 56, 56))], "final")
    assert scores[0] != scores[1] and math.isclose(scores[0], scores[1], rel_tol=TIE_TOLERANCE)
    assert select_point(scores) == 0
    assert select_point([scores[1], scores[0]]) == 0  # either way round: the earlier one
    # one more correct row at one seed is a real difference (1 / 216 = 0.0046 apart): it still wins
    assert select_point(point_scores([_records((55, 55, 57)), _records((55, 56, 57))], "final")) == 1
    assert select_point([0.5, 0.5 * (1 + 1e-9)]) == 1 and select_point([0.5 * (1 + 1e-14), 0.5]) == 0


def test_a_tie_among_later_points_goes_to_the_earliest_of_them() -> None:
    # point 0 is lower; points 1 and 2 tie up to rounding, point 2's float the larger: point 1
    scores = point_scores([_records((50, 50, 50)), _records((55, 55, 57)), _records((55, 56, 56))], "final")
    assert scores[2] > scores[1] and select_point(scores) == 1


def test_a_finished_point_with_a_nan_score_ranks_below_every_finite_one_but_is_not_diverged() -> None:
    # point 0 finished at both seeds, local validation NaN at seed 1; point 1 diverged at seed 0; point 2 finished, 0.5
    finished_nan = [[{"round": 1, "local_val_acc": 0.9}], [{"round": 1, "local_val_acc": math.nan}]]
    diverged = [None, [{"round": 1, "local_val_acc": 0.9}]]
    fine = [[{"round": 1, "local_val_acc": 0.5}], [{"round": 1, "local_val_acc": 0.5}]]
    scores = point_scores([finished_nan, diverged, fine], "local_final")
    assert math.isnan(scores[0]) and scores[1] == -math.inf and scores[2] == 0.5
    assert select_point(scores) == 2 and select_point(scores[:2]) == 0  # below every finite score; none finite: the first
    assert point_scores([[None, [{"round": 1, "local_val_acc": math.nan}]]], "local_final") == [-math.inf]  # diverged at a seed wins

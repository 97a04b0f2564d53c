"""The HTML report's mean ± std of a group's seeds is the compare table's (:func:`chillfl.metrics.stats.summarize`): one
seed has no spread (None), not a std of 0.0 that reads as "the seeds agreed". Before, ``report.html.mean_std`` took its
own numpy mean and std and gave 0.0 for one value, where the compare table gives none."""

from __future__ import annotations

import math

from chillfl.metrics.stats import summarize
from chillfl.report.html import _fmt, mean_std


def test_one_seed_has_no_spread_as_in_the_compare_table() -> None:
    assert summarize([0.5]).std is None
    assert mean_std([0.5]) == (0.5, None, 1)
    assert mean_std([None, 0.5, math.inf]) == (0.5, None, 1)  # the one finite value
    assert _fmt("final_global_acc", *mean_std([0.5]), pct=True) == "50.00"
    assert _fmt("rounds_to_target", *mean_std([7.0]), pct=False) == "7.0"


def test_several_seeds_are_summarize_s_numbers() -> None:
    values = [0.1, 0.7, 0.3, 0.35]
    s = summarize(values)
    assert mean_std([*values, None, math.nan]) == (s.mean, s.std, 4)
    assert _fmt("final_global_acc", *mean_std(values), pct=True) == f"{100 * s.mean:.2f} ± {100 * s.std:.2f}"


def test_no_finite_value_is_a_dash() -> None:
    mean, std, n = mean_std([None, math.nan])
    assert math.isnan(mean) and std is None and n == 0
    assert _fmt("final_global_acc", mean, std, n, pct=True) == "–"

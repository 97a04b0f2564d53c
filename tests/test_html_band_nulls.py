"""The HTML report's curves drew a line straight across a round whose value was recorded null (measured, nothing
finite), where the comparison's curves.png breaks the line there since 2026-12-06: the two figures of one comparison
disagreed. The report's band breaks at a null too."""

from __future__ import annotations

import math

from chillfl.report.html import band


def test_a_null_round_breaks_the_reports_band() -> None:
    records = [{"round": 1, "global_acc": 0.5}, {"round": 2, "global_acc": None}, {"round": 3, "global_acc": 0.7}]
    rounds, mean, std = band([records], "global_acc")
    assert rounds.tolist() == [1, 2, 3]
    assert mean[0] == 0.5 and math.isnan(mean[1]) and mean[2] == 0.7


def test_a_key_never_measured_stays_empty() -> None:
    rounds, mean, _ = band([[{"round": 1, "local_acc": None}, {"round": 2, "local_acc": None}]], "local_acc")
    assert rounds.tolist() == [] and mean.tolist() == []

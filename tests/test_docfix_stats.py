"""The ZERO_TOLERANCE example quoted in docs/comparisons.md and in chillfl/metrics/stats.py is what Python computes.

Both once quoted ``0.125 + 0.0417 - 0.1667`` as summing to -1.85e-17; it sums to +2.78e-17 (and the docstring's
7-digit form to exactly 0). The example now is accuracies whose differences cancel exactly but round in float
subtraction; this recomputes it and checks that both texts quote the numbers it gives."""

from __future__ import annotations

import math
from pathlib import Path

from chillfl.metrics.stats import paired_difference, summarize

ROOT = Path(__file__).resolve().parents[1]
TEXTS = (ROOT / "docs" / "comparisons.md", ROOT / "src" / "chillfl" / "metrics" / "stats.py")


def test_the_quoted_example_is_what_python_computes() -> None:
    variant, baseline = [9 / 24, 11 / 24, 6 / 24], [6 / 24, 10 / 24, 10 / 24]
    paired = paired_difference(variant, baseline)
    assert paired.differences == (0.125, 0.04166666666666663, -0.16666666666666669)  # 3/24, 1/24, -4/24, rounded
    raw = summarize(paired.differences).mean
    assert raw == math.fsum(paired.differences) / 3 and f"{raw:.2e}" == "-1.85e-17"  # not 0, before the tolerance
    assert paired.summary.mean == 0.0 and paired.sign_holds == 0  # ZERO_TOLERANCE makes it 0
    for path in TEXTS:
        text = " ".join(path.read_text(encoding="utf-8").split())  # line breaks as spaces
        assert "9/24, 11/24, 6/24 against 6/24, 10/24, 10/24" in text, path
        assert all(repr(d) in text for d in paired.differences) and "-1.85e-17" in text, path
        assert "0.0417 - 0.1667" not in text and "0.0416667 - 0.1666667" not in text, path

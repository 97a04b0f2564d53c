"""``chillfl reproduce``: verdicts on hand-worked differences, and every claim's config resolves."""

from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.reproduce import CLAIMS, PAPERS, accuracy_verdict, bytes_verdict, claim_config


def test_accuracy_verdicts() -> None:
    # d = [0.02, 0.03, 0.04]: mean 0.03, std 0.01, half width 4.3027 * 0.01 / sqrt(3) = 0.024842 -> [+0.52, +5.48] points > 0
    measured, verdict = accuracy_verdict([0.02, 0.03, 0.04])
    assert verdict == "reproduces" and measured.startswith("+3.00 ± 1.00 points [95 % CI +0.52, +5.48], sign holds 3/3")
    # d = [0.05, -0.02, 0.10]: interval [-10.64, +19.31] points contains 0
    assert accuracy_verdict([0.05, -0.02, 0.10])[1] == "does not at this scale"
    assert accuracy_verdict([-0.02, -0.03, -0.04])[1] == "opposite"
    assert accuracy_verdict([0.01])[1] == "reproduces"  # one seed: the sign only


def test_bytes_verdicts() -> None:
    # ratios 0.33 and 0.34 <= 0.5 in every seed; mean 0.335
    measured, verdict = bytes_verdict([0.33, 0.34], 0.5)
    assert verdict == "reproduces" and "0.335" in measured
    assert bytes_verdict([0.4, 0.6], 0.5)[1] == "does not at this scale"
    assert bytes_verdict([1.2, 1.1], 0.5)[1] == "opposite"


def test_every_claim_config_resolves() -> None:
    assert {c.paper for c in CLAIMS} == set(PAPERS)
    for claim in CLAIMS:
        config = claim_config(claim, [0, 1, 2], None)
        assert config.compare["seeds"] == [0, 1, 2] and config.compare["baseline"] == claim.baseline
        if claim.keep:
            assert sorted(config.variants) == sorted(claim.keep)
        if claim.tune:
            assert config.eval.validation > 0


def test_unknown_paper_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "nopaper"])
    assert exc.value.code == 2

"""SCARLET's accuracy claim is worded as the superiority test that judges it (an interval above 0), with Fig. 7's size at
alpha = 0.05 (about +2 points): "at least DS-FL's" read "does not at this scale" at equal accuracy, and had no size."""

from __future__ import annotations

from chillfl.reproduce import ARTEFACT, CLAIMS, accuracy_verdict

SCARLET_ACCURACY = next(c for c in CLAIMS if c.paper == "scarlet" and c.section == "headline" and c.metric == "accuracy")


def test_scarlets_accuracy_claim_is_worded_as_the_superiority_test_with_fig_7s_size() -> None:
    assert "higher than DS-FL's" in SCARLET_ACCURACY.text and "at least" not in SCARLET_ACCURACY.text
    assert SCARLET_ACCURACY.paper_points == 2.0 and "+2 points" in SCARLET_ACCURACY.text
    # +2, +2.5, +1.5 points: interval [+0.76, +3.24] above 0, mean 1.0x the paper's -> reproduces
    assert accuracy_verdict([0.02, 0.025, 0.015], SCARLET_ACCURACY.paper_points)[1] == "reproduces"
    # +10, +11, +9 points: 5x the paper's +2 -> not read as reproducing it
    assert accuracy_verdict([0.10, 0.11, 0.09], SCARLET_ACCURACY.paper_points)[1] == ARTEFACT

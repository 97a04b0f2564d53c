"""A run whose final global accuracy is itself non-finite gets its own caveat, not "their accuracy counts" (numext finding 4).

FedAdam with ``server_lr = 1e30`` finished with finite weights but NaN logits: ``global_acc`` NaN (the table's "-"),
yet the loss caveat named it and said its accuracy counts.
"""

from __future__ import annotations

import math

import pytest

from chillfl.report.caveats import ends_with_nonfinite_accuracy, ends_with_nonfinite_loss, nonfinite_accuracy_caveat


@pytest.mark.parametrize(
    ("records", "loss", "accuracy"),
    [
        ([{"round": 1, "global_acc": math.nan, "global_loss": math.nan}], False, True),  # NaN logits: accuracy and loss both not numbers
        ([{"round": 1, "global_acc": 0.1, "global_loss": math.nan}], True, False),  # finite accuracy, overflowing loss: the loss caveat's
        ([{"round": 1, "global_acc": 0.5, "global_loss": 1.0}, {"round": 2, "global_acc": math.nan, "global_loss": None}], False, True),
        ([{"round": 1, "global_acc": math.nan, "global_loss": math.nan}, {"round": 2, "global_acc": 0.3, "global_loss": 2.0}], False, False),
        ([{"round": 1, "global_acc": math.nan}], False, True),  # no loss recorded: the accuracy still says it
        ([], False, False),
    ],
)
def test_a_nonfinite_accuracy_is_not_the_loss_caveats(records, loss, accuracy) -> None:
    assert ends_with_nonfinite_loss(records) is loss
    assert ends_with_nonfinite_accuracy(records) is accuracy


def test_the_accuracy_caveat_names_the_runs_and_does_not_say_they_count() -> None:
    assert nonfinite_accuracy_caveat([]) is None
    line = nonfinite_accuracy_caveat(["blown-s0", "blown-s1"]) or ""
    assert line.startswith("logits caveat: 2 runs finished with non-finite logits") and line.endswith(": blown-s0, blown-s1.")
    assert "count" not in line and "\n" not in line

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


def test_a_comparison_names_a_run_with_nonfinite_logits_on_its_own_line(tmp_path) -> None:
    """End to end: FedAdam at ``server_lr = 1e30`` finishes with finite weights and NaN logits; the comparison's table says so on
    the logits caveat's line, and the loss caveat, which says accuracy counts, does not name it."""
    from test_caveats import TINY

    from chillfl.config import load_config
    from chillfl.sweeps.plan import CompareOptions
    from chillfl.sweeps.run import run_compare

    path = tmp_path / "t.toml"
    path.write_text('name = "t"\n[algorithm]\nname = "fedadam"\n[variants."ok"]\n"algorithm.server_lr" = 0.01\n'
                    '[variants."blown"]\n"algorithm.server_lr" = 1e30\n')
    config = load_config(path, {**TINY, "federation.rounds": 1, "out_dir": str(tmp_path / "out")})
    result = run_compare(config, [], progress=False, write=False, options=CompareOptions(seeds=[0]))
    assert "\n\nlogits caveat: 1 run finished with non-finite logits" in result.table and result.table.rstrip().endswith(": blown.")
    assert "loss caveat" not in result.table

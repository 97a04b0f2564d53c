"""``chillfl analyze scarlet-deficit``: a config that does not evaluate every round is refused before any run (it was a
KeyError traceback after all of them), and 1-2 seeds get the few-seeds warning compare and reproduce print."""
from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.metrics.stats import few_seeds_warning

FAST = ["-q", "--rounds", "2", "--durations", "0", "--betas", "2", "--parts", "d", "federation.num_clients=4"]


def test_eval_every_other_than_one_is_refused_before_any_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "scarlet-deficit", "--seeds", "0", *FAST, "eval.every=2"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("chillfl: error: eval.every: scarlet-deficit reads the server accuracy") and err.rstrip().endswith("needs 1, got 2")


def test_one_seed_is_warned_under_the_header(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "scarlet-deficit", "--seeds", "0", *FAST]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == few_seeds_warning(1)
    assert lines[0].startswith("SCARLET vs DS-FL on ") and lines[1].startswith("scaled D ")

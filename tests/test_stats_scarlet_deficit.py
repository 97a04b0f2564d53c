"""``chillfl analyze scarlet-deficit``: a config that does not evaluate every round is refused before any run (it was a
KeyError traceback after all of them), and 1-2 seeds get the few-seeds warning compare and reproduce print."""
from __future__ import annotations

import pytest

from chillfl.cli import main
from chillfl.metrics.stats import few_seeds_warning

FAST = ["-q", "--rounds", "2", "--durations", "0", "--betas", "2", "--parts", "d", "federation.num_clients=4"]


@pytest.mark.parametrize(("args", "said"), [
    (["--rounds", "3,4", "--parts", "d", "eval.every=2"], "eval.every: = 2 evaluates no round 3 of --rounds 3,4"),  # 4 is its last
    (["--rounds", "2", "--parts", "smooth", "eval.every=2"], "eval.every: the 'smooth' table averages"),
])
def test_a_length_read_but_not_evaluated_is_refused_before_any_run(args: list[str], said: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "scarlet-deficit", "-q", "--seeds", "0", "--durations", "0", "--betas", "2", "federation.num_clients=4", *args]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"chillfl: error: {said}")


def test_lengths_on_evaluated_rounds_still_run(capsys: pytest.CaptureFixture[str]) -> None:
    """A run evaluates its last round and every eval.every-th: lengths 2 and 3 of a 3-round run with eval.every = 2 are read."""
    assert main(["analyze", "scarlet-deficit", "-q", "--seeds", "0", "--rounds", "2,3", "--durations", "0", "--betas", "2", "--parts", "d",
                 "federation.num_clients=4", "eval.every=2"]) == 0
    assert "| 3 | DS-FL" in capsys.readouterr().out


def test_one_seed_is_warned_under_the_header(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "scarlet-deficit", "--seeds", "0", *FAST]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == few_seeds_warning(1)
    assert lines[0].startswith("SCARLET vs DS-FL on ") and lines[1].startswith("scaled D ")

"""``chillfl reproduce``'s verdicts hold up on hand-picked numbers (no training).

* "likely a step-size artefact" needs an interval above 0: a mean 3x the paper's over an interval that contains 0, or at
  one seed (no interval), is no verdict beyond "does not at this scale".
* An effect with its interval above 0 but under a third of the paper's (accuracy points; a rounds speed-up's gain over
  1x) is "same sign, much smaller", not "reproduces"; a rounds part measured in the runs of a likely step-size artefact
  says so too.
* A verdict that rests on fewer seeds than asked (a run diverged) says how many, names the failed seed and warns under 3.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chillfl.report.compare import CompareResult
from chillfl.reproduce import ARTEFACT, CLAIMS, Claim, Outcome, accuracy_verdict, format_outcomes, rounds_verdict, run_claim, write_verdicts
import chillfl.reproduce as reproduce

SMALLER = "same sign, much smaller"


def test_a_large_mean_whose_interval_contains_0_is_no_artefact() -> None:
    # 40, -5, -1 points: mean 11.33 (3.4x the paper's 3.37), std 24.91, half-width 4.302653 * 24.91 / sqrt(3) = 61.87:
    # [-50.54, +73.20] contains 0
    measured, verdict = accuracy_verdict([0.40, -0.05, -0.01], 3.37)
    assert verdict == "does not at this scale" and "[95 % CI -50.54, +73.20]" in measured and "mistuned" not in measured


def test_one_seed_far_beyond_the_paper_is_no_verdict() -> None:
    measured, verdict = accuracy_verdict([0.40], 3.37)  # 11.9x the paper's, but one seed: no interval
    assert (measured, verdict) == ("+40.00 points (one seed: no interval, so no verdict beyond this)", "does not at this scale")


def test_an_accuracy_gain_under_a_third_of_the_papers_is_much_smaller() -> None:
    # 0.81, 0.79, 0.83 points: mean 0.81, std 0.02 -> [+0.76, +0.86] above 0, but 0.81 / 8.35 = 0.097 < 1/3
    measured, verdict = accuracy_verdict([0.0081, 0.0079, 0.0083], 8.35)
    assert verdict == f"{SMALLER} (0.10x the paper's +8.35)" and "[95 % CI +0.76, +0.86]" in measured
    # at a third of the paper's or more it reproduces: 2, 3, 4 points against 8.35 (0.36x)
    assert accuracy_verdict([0.02, 0.03, 0.04], 8.35)[1] == "reproduces"
    assert accuracy_verdict([0.0081, 0.0079, 0.0083])[1] == "reproduces"  # no paper number: nothing to compare with


def test_a_rounds_speedup_under_a_third_of_the_papers_gain_is_much_smaller() -> None:
    # 20 / 19 = 1.05x at every seed: faster, but its gain 0.05 is under (6 - 1) / 3 = 1.67
    assert rounds_verdict([19, 19, 19], [20, 20, 20], 6.0)[1] == f"{SMALLER} (mean 1.05x against the paper's up to 6x)"
    # 10/4, 10/3, 10/3 = 2.5x, 3.33x, 3.33x: mean 3.06x, gain 2.06 > 1.67
    assert rounds_verdict([4, 3, 3], [10, 10, 10], 6.0)[1] == "reproduces"


def _row(variant: str, diffs: list[float | None], rounds: list[int | None], failed: dict[str, str] | None = None) -> dict[str, Any]:
    """A seed table's row: ``diffs`` per seed (None: the run failed, ``failed`` says how); the paired difference keeps the rest."""
    kept = [d for d in diffs if d is not None]
    return {"variant": variant, "seeds": list(range(len(diffs))), "diverged_seeds": [int(s) for s in failed or {}], "failed": failed or {},
            "rounds_to_target": rounds, "delta_acc": {"n": len(kept), "per_seed": kept}}


def _outcome(claim: Claim, rows: list[dict[str, Any]], seeds: list[int]) -> Outcome:
    cache = {reproduce._key(claim): CompareResult(None, rows, "")}  # the comparison's result, as if it had run
    return run_claim(claim, seeds, cache=cache, write=False)


def test_the_rounds_part_of_a_step_size_artefact_is_qualified() -> None:
    rows = [_row("T=1", [0.0] * 3, [9, 8, 10]), _row("T=0.05", [0.60, 0.62, 0.61], [2, 2, 2])]  # 4.5x, 4x, 5x faster
    o = _outcome(CLAIMS[0], rows, [0, 1, 2])
    assert o.verdict == ARTEFACT and o.rounds_verdict == f"reproduces; {ARTEFACT} too (the accuracy part's runs)"
    # the accuracy part within the paper's size: the rounds part stands as measured
    o = _outcome(CLAIMS[0], [rows[0], _row("T=0.05", [0.03, 0.04, 0.05], [2, 2, 2])], [0, 1, 2])
    assert (o.verdict, o.rounds_verdict) == ("reproduces", "reproduces")


def test_a_verdict_says_it_rests_on_the_seeds_that_finished(tmp_path: Path) -> None:
    # seed 0 of T=0.02 diverged: the verdict reads seeds 1 and 2 alone (-9.06 at 2/2), and says so, with the 2-seed warning
    claim = Claim("flexchill", "probe", "demo", "T=0.02", "T=1", grid=("temperature=1,0.02",), paper_points=3.37)
    rows = [_row("T=1", [0.0] * 3, [3, 3, 3]), _row("T=0.02", [None, -0.0836, -0.0976], [None, None, None], {"0": "diverged at round 1"})]
    o = _outcome(claim, rows, [0, 1, 2])
    assert o.rests_on == (1, 2) and o.verdict == "opposite"
    assert "sign holds 2/2; rests on 2 of 3 seeds (seed 0: T=0.02 diverged at round 1): 2 seeds: the 95 % intervals are uninformative" in o.measured
    assert "rests on" in format_outcomes([o])
    written = write_verdicts("flexchill", [Outcome(o.claim, o.seeds, o.measured, o.verdict, folder=tmp_path / "probe-compare", per_seed=o.per_seed,
                                                   rests_on=o.rests_on)])
    assert written is not None and "warning: 2 seeds: the 95 % intervals are uninformative" in written.read_text()
    # every seed finished: nothing added, no warning
    full = _outcome(claim, [rows[0], _row("T=0.02", [-0.08, -0.09, -0.10], [None] * 3)], [0, 1, 2])
    assert full.rests_on == (0, 1, 2) and "rests on" not in full.measured


def test_the_command_line_warns_of_a_claim_resting_on_fewer_seeds(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """stderr said the few-seeds warning from the seeds asked for only: 3 asked, 2 finished, nothing said there."""
    import chillfl.reproduce as rp
    from chillfl.cli import main

    claim = Claim("flexchill", "probe", "demo", "T=0.02", "T=1", grid=("temperature=1,0.02",), paper_points=3.37)
    rows = [_row("T=1", [0.0] * 3, [3, 3, 3]), _row("T=0.02", [None, -0.0836, -0.0976], [None, None, None], {"0": "diverged at round 1"})]
    o = _outcome(claim, rows, [0, 1, 2])
    monkeypatch.setattr(rp, "reproduce", lambda *args, **kwargs: [o])
    monkeypatch.setattr(rp, "write_verdicts", lambda *args, **kwargs: None)
    assert main(["reproduce", "flexchill", "--seeds", "0,1,2", "--out", str(tmp_path)]) == 0
    assert "2 seeds: the 95 % intervals are uninformative" in capsys.readouterr().err


def test_the_rounds_part_reads_the_seeds_both_finished_only() -> None:
    """The baseline diverged at seed 1: its 'baseline never' counted as the variant's win there (reproduces, with the
    accuracy part resting on seed 0 alone); at the one seed both finished there is no verdict beyond its number."""
    claim = Claim("flexchill", "probe", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), paper_points=3.37, paper_speedup=2.0)
    rows = [_row("T=1", [0.0, None], [10, None], {"1": "diverged at round 4"}), _row("T=0.05", [0.02, 0.03], [6, 8])]
    o = _outcome(claim, rows, [0, 1])
    assert o.rests_on == (0,)
    assert o.rounds_verdict == "does not at this scale" and "baseline never" not in o.measured


def test_the_seeds_a_verdict_dropped_are_listed_in_seed_order() -> None:
    claim = Claim("flexchill", "probe", "demo", "T=0.02", "T=1", grid=("temperature=1,0.02",), paper_points=3.37)
    rows = [_row("T=1", [None, 0.0, 0.0, 0.0], [3] * 4, {"0": "diverged at round 2"}),  # the baseline's, read after the variant's
            _row("T=0.02", [-0.08, -0.09, None, -0.1], [None] * 4, {"2": "diverged at round 1"})]
    o = _outcome(claim, rows, [0, 1, 2, 3])
    assert o.measured.index("seed 0:") < o.measured.index("seed 2:")

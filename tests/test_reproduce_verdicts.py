"""``chillfl reproduce``'s verdicts say what they mean, on hand-worked synthetic records (no training but the last test).

* An accuracy effect more than EXCESS = 3 times the paper's is "likely a step-size artefact", not "reproduces"
  (FLex&Chill claim 1 once read "reproduces" at +61 points against the paper's +3.37).
* A claim with a rounds part ("up to 6x fewer rounds") has it judged on its own, from each seed's rounds to the target.
* Without ``--out`` the comparisons land in a folder named after the paper (``results/flexchill/...``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import chillfl.reproduce as reproduce
from chillfl.cli import main
from chillfl.report.compare import CompareResult
from chillfl.reproduce import ARTEFACT, CLAIMS, EXCESS, Claim, accuracy_verdict, claim_config, format_outcomes, rounds_verdict, run_claim


def test_an_effect_far_beyond_the_papers_is_a_likely_step_size_artefact() -> None:
    # diffs 60, 62, 58 points: mean 60.00, std sqrt((0 + 4 + 4) / 2) = 2.00, se 2 / sqrt(3) = 1.1547,
    # t(0.975, 2) = 4.3027 -> half-width 4.968 -> [55.03, 64.97]: above 0 ("reproduces" by the interval alone),
    # but 60.00 / 3.37 = 17.8x the paper's effect > EXCESS = 3.
    measured, verdict = accuracy_verdict([0.60, 0.62, 0.58], paper_points=3.37)
    assert EXCESS == 3.0 and verdict == ARTEFACT == "likely a step-size artefact"
    assert measured.startswith("+60.00 ± 2.00 points [95 % CI +55.03, +64.97], sign holds 3/3")
    assert "17.8x the paper's +3.37: the baseline's step size may be mistuned (both share one lr, and T < 1 steps 1/T times larger)" in measured
    tuned = accuracy_verdict([0.60, 0.62, 0.58], paper_points=3.37, tuned=True)
    assert tuned[1] == ARTEFACT and "check whether its tuned lr sits at the grid's edge" in tuned[0]


def test_an_effect_near_the_papers_reproduces() -> None:
    # diffs 3, 4, 5 points: mean 4.00, std 1.00, half-width 4.3027 / sqrt(3) = 2.484 -> [1.52, 6.48] > 0;
    # 4.00 / 3.37 = 1.19x the paper's: within EXCESS.
    measured, verdict = accuracy_verdict([0.03, 0.04, 0.05], paper_points=3.37)
    assert verdict == "reproduces" and "[95 % CI +1.52, +6.48]" in measured and "mistuned" not in measured


def test_the_excess_bound_on_either_side() -> None:
    # paper 5 points -> bound 3 x 5 = 15 points: one seed has no interval (no verdict) either side; 3 seeds at mean 16 are flagged.
    assert accuracy_verdict([0.14], paper_points=5.0)[1] == "does not at this scale"
    assert accuracy_verdict([0.16], paper_points=5.0)[1] == "does not at this scale"
    assert accuracy_verdict([0.15, 0.16, 0.17], paper_points=5.0)[1] == ARTEFACT
    assert accuracy_verdict([0.16])[1] == "does not at this scale"  # no paper number: nothing to compare with
    assert accuracy_verdict([0.13, 0.14, 0.15], paper_points=5.0)[1] == "reproduces"  # 3 seeds within the bound: the interval decides
    assert accuracy_verdict([-0.60, -0.62, -0.58], paper_points=3.37)[1] == "opposite"  # a large loss is no artefact of a gain


@pytest.mark.parametrize(("variant", "baseline", "cells", "verdict"), [
    ([1, 2, 3], [6, 6, 6], "6.00x, 3.00x, 2.00x", "reproduces"),  # 6/1, 6/2, 6/3: faster at every seed, mean 3.67x
    ([6, None], [3, 3], "0.50x, variant never", "opposite"),  # 3/6 = 0.5, and never reached: slower at both
    ([3, 2], [3, 4], "1.00x, 2.00x", "does not at this scale"),  # 3/3 = 1: not faster at seed 0
    ([2, None], [None, None], "baseline never, neither", "does not at this scale"),
    ([2], [6], "3.00x", "does not at this scale"),  # faster at its one seed: one draw, no verdict (it "reproduced")
])
def test_rounds_verdicts_on_given_rounds(variant: list[int | None], baseline: list[int | None], cells: str, verdict: str) -> None:
    measured, got = rounds_verdict(variant, baseline, 6.0)
    assert got == verdict
    assert measured == f"rounds to target: speed-up {cells} per seed (paper: up to 6x)" + ("; one seed: no verdict beyond this" if len(variant) == 1 else "")


def _seed_row(variant: str, diffs: list[float], rounds: list[int | None]) -> dict[str, Any]:
    seeds = list(range(len(diffs)))
    return {"variant": variant, "seeds": seeds, "diverged_seeds": [], "failed": {}, "rounds_to_target": rounds,
            "delta_acc": {"n": len(diffs), "per_seed": diffs}}


def _outcome(claim: Claim, rows: list[dict[str, Any]], seeds: list[int]) -> reproduce.Outcome:
    cache = {reproduce._key(claim): CompareResult(None, rows, "")}  # the comparison's result, as if it had run
    return run_claim(claim, seeds, cache=cache, write=False)


def test_flexchill_claim_1_judges_its_rounds_part_and_flags_plus_61_points() -> None:
    claim = CLAIMS[0]
    assert claim.paper == "flexchill" and "2.37x fewer rounds" in claim.text and (claim.paper_points, claim.paper_speedup) == (3.37, 2.37)
    rows = [_seed_row("T=1", [0.0, 0.0, 0.0], [9, 8, 10]), _seed_row("T=0.05", [0.60, 0.62, 0.61], [2, 2, 2])]
    o = _outcome(claim, rows, [0, 1, 2])
    # mean (60 + 62 + 61) / 3 = 61.00 points = 18.1x the paper's 3.37; rounds 9/2, 8/2, 10/2 = 4.5x, 4x, 5x: faster at every
    # seed, in the same runs at one shared lr: the rounds part is qualified as the accuracy part is
    assert o.verdict == ARTEFACT and o.rounds_verdict == "reproduces; likely a step-size artefact too (the accuracy part's runs)"
    assert "18.1x the paper's +3.37" in o.measured and "speed-up 4.50x, 4.00x, 5.00x per seed (paper: up to 2.37x)" in o.measured
    assert "accuracy: **likely a step-size artefact**; rounds: **reproduces; likely a step-size artefact too (the accuracy part's runs)** |" in format_outcomes([o])


def test_a_one_seed_untuned_claim_reads_table_4_rows() -> None:
    """One seed, no tuning: the comparison's rows are Table 4's (numbers, not per-seed statistics)."""
    rows = [{"variant": "T=1", "delta_acc": 0.0, "rounds_to_target": 8}, {"variant": "T=0.05", "delta_acc": 0.02, "rounds_to_target": 16}]
    o = _outcome(CLAIMS[0], rows, [0])
    # +2.00 points at one seed: no interval -> no verdict (0.6x the paper's); 8 / 16 = 0.50x, slower, but at one seed: no verdict
    assert (o.verdict, o.rounds_verdict) == ("does not at this scale", "does not at this scale") and o.per_seed == (2.0,)
    assert "speed-up 0.50x per seed (paper: up to 2.37x); one seed: no verdict beyond this" in o.measured


def test_claims_without_a_rounds_part_have_no_rounds_verdict() -> None:
    claim = CLAIMS[1]  # tuned lr: no rounds part, no paper number
    o = _outcome(claim, [_seed_row("T=1", [0.0] * 3, [5] * 3) | {"tuned": {}}, _seed_row("T=0.05", [0.03, 0.04, 0.05], [5] * 3) | {"tuned": {}}], [0, 1, 2])
    assert o.rounds_verdict is None and o.verdict == "reproduces" and "rounds" not in format_outcomes([o]).split("\n")[2]


def test_claims_write_under_a_folder_named_after_the_paper() -> None:
    assert claim_config(CLAIMS[0], [0], None).out_dir == os.path.join("results", "flexchill")  # the config's out_dir / paper
    assert claim_config(CLAIMS[0], [0], "elsewhere").out_dir == "elsewhere"  # --out: that folder itself


SMALL = {"federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 2, "eval.clients": "none",
         "model.name": "mlp", "client.lr": 0.05}


def test_reproduce_writes_results_flexchill_not_the_demos_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny real claim (4 clients, an MLP, 2 rounds, one seed) in a fresh folder: everything under results/flexchill/."""
    small = Claim("flexchill", "T = 0.05 vs T = 1 (tiny)", "demo", "T=0.05", "T=1", grid=("temperature=1,0.05",), overrides=SMALL)
    monkeypatch.setattr(reproduce, "CLAIMS", (small,))
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "flexchill", "--seeds", "0", "--dry-run"]) == 0
    assert "result folders under: results/flexchill" in capsys.readouterr().out.replace(os.sep, "/")
    assert main(["reproduce", "flexchill", "--seeds", "0", "-q"]) == 0
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["flexchill"]
    assert sorted(p.name for p in (tmp_path / "results" / "flexchill").iterdir() if not p.name.endswith(".png")) == ["demo-compare", "reproduce-flexchill.md"]

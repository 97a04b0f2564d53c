"""``chillfl reproduce``'s rounds part where the claim's reference failed at a seed (statfix, report-stats finding 2).

That seed has no target (the comparison's table leaves it out: ``1.0 (2/2)``), yet the rounds part printed "neither" for it,
never said the reference failed, and counted it against "reproduces". Rows are built by the comparison's own
:func:`build_seed_rows` from hand-made runs, read back as ``table.json`` holds them, and judged by :func:`run_claim`."""

from __future__ import annotations

import json
from typing import Any

from chillfl import reproduce
from chillfl.report.compare import CompareResult, build_seed_rows
from chillfl.reproduce import CLAIMS, format_outcomes, rounds_verdict, run_claim
from chillfl.runner import RunOutput
from chillfl.storage.results import summarize
from chillfl.sweeps.plan import Variant

CLAIM = CLAIMS[0]  # FLex&Chill Table 4: T=0.05 vs T=1, target T=4's best accuracy, paper 2.37x
REF, BASE, VAR = Variant("T=4", {}, 4.0), Variant("T=1", {}, 1.0), Variant("T=0.05", {}, 0.05)


def _run(reach: int, rounds: int = 8, top: float = 0.5) -> RunOutput:
    """A finished run whose global accuracy is 0.1 until round ``reach``, then ``top`` (its best)."""
    records: list[dict[str, Any]] = [{"round": r, "global_acc": top if r >= reach else 0.1, "global_loss": 1.0} for r in range(1, rounds + 1)]
    return RunOutput(None, records, summarize(records))


def _outcome(ref_fails_at: int | None) -> reproduce.Outcome:
    """Seeds 0, 1, 2: T=0.05 reaches T=4's best (0.5) at rounds 2, 3, 2, T=1 at 6, 7, 6; T=4 diverged at ``ref_fails_at``."""
    seeds = [0, 1, 2]
    runs: dict[tuple[str, int], RunOutput | None] = {}
    for s, (v, b) in zip(seeds, [(2, 6), (3, 7), (2, 6)]):
        runs[(REF.label, s)] = None if s == ref_fails_at else _run(1)
        runs[(BASE.label, s)], runs[(VAR.label, s)] = _run(b), _run(v)
    failed = {} if ref_fails_at is None else {(REF.label, ref_fails_at): "diverged at round 1"}
    rows = build_seed_rows([REF, BASE, VAR], runs, seeds, REF, BASE, None, failed=failed)
    assert rows[0]["target"] == [None if s == ref_fails_at else 0.5 for s in seeds]  # the comparison's own: no target there
    read_back = json.loads(json.dumps(rows))  # as table.json holds them (reproduce --resume reads these)
    return run_claim(CLAIM, seeds, cache={reproduce._key(CLAIM): CompareResult(None, read_back, "")}, write=False)


def test_a_seed_without_a_target_is_a_dash_said_once_and_counts_neither_way() -> None:
    o = _outcome(ref_fails_at=2)
    # speed-ups 6/2 = 3.00x, 7/3 = 2.33x at the seeds with a target (mean 2.67x, over 1 + 1.37 / 3): faster at every one of them
    assert ("rounds to T=4's best accuracy: speed-up 3.00x, 2.33x, - per seed (paper: up to 2.37x); "
            "seed 2: no target, the reference T=4 diverged at round 1 (no rounds to it: neither for nor against)") in o.measured
    assert "neither per seed" not in o.measured
    assert o.rounds_verdict is not None and o.rounds_verdict.startswith("reproduces")
    assert o.rests_on == (0, 1, 2)  # the accuracy part's pairs: T=0.05 and T=1 finished at every seed
    assert "rounds: **reproduces" in format_outcomes([o])


def test_every_seed_with_a_target_still_reads_as_before() -> None:
    o = _outcome(ref_fails_at=None)
    assert "speed-up 3.00x, 2.33x, 3.00x per seed (paper: up to 2.37x)" in o.measured and "no target" not in o.measured
    assert o.rounds_verdict is not None and o.rounds_verdict.startswith("reproduces")


def test_a_real_neither_still_blocks_and_a_dash_never_does() -> None:
    # both never reached a target that existed: "neither", which is not faster, so no "reproduces"
    assert rounds_verdict([2, None], [6, None], 2.37)[1] == "does not at this scale"
    # the same seed without a target: "-", and 1 seed with a target is one draw (no verdict), not "does not" by a "neither"
    measured, verdict = rounds_verdict([2, 3, None], [6, 7, None], 2.37, has_target=[True, True, False])
    assert measured == "rounds to target: speed-up 3.00x, 2.33x, - per seed (paper: up to 2.37x)" and verdict == "reproduces"
    measured, verdict = rounds_verdict([2, None], [6, None], 2.37, has_target=[True, False])
    assert measured.endswith("speed-up 3.00x, - per seed (paper: up to 2.37x); one seed: no verdict beyond this")
    assert verdict == "does not at this scale"


def test_a_one_seed_row_whose_reference_failed_has_no_target() -> None:
    rows = [{"variant": "T=4", "failed": "diverged at round 1", "delta_acc": None, "rounds_to_target": None, "target": None},
            {"variant": "T=1", "delta_acc": None, "rounds_to_target": None, "target": None},
            {"variant": "T=0.05", "delta_acc": 0.02, "rounds_to_target": None, "target": None}]
    o = run_claim(CLAIM, [0], cache={reproduce._key(CLAIM): CompareResult(None, rows, "")}, write=False)
    assert "speed-up - per seed" in o.measured and "neither" not in o.measured.split("(no rounds")[0]
    assert "seed 0: no target, the reference T=4 diverged at round 1" in o.measured

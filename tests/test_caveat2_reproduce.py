"""``chillfl reproduce``'s verdict says where it reads an accuracy that is no trained global model's.

A verdict reads the comparison's rows (its ``table.json``): the variant's paired difference to the baseline and, for a
rounds part, each seed's rounds to the reference's best accuracy. A row marked ``global_model`` ("none": its clients' own
models' mean; "untrained": the initial model's; "partial": a model no client trains or uses as it is) was judged as a
global model's accuracy, unsaid: the table's caveat line stayed in the table, which the verdict's reader does not see.
Now the measured cell carries the table's own line (:func:`~chillfl.report.caveats.global_model_caveat`)."""

from __future__ import annotations

from typing import Any

import chillfl.reproduce as reproduce
from chillfl.report.caveats import NO_GLOBAL_MODEL, PARTIAL_GLOBAL_MODEL, global_model_caveat
from chillfl.report.compare import CompareResult
from chillfl.reproduce import Claim, format_outcomes, run_claim

SEEDS = [0, 1, 2]


def _row(variant: str, diffs: list[float], kind: str | None = None) -> dict[str, Any]:
    stat = {"n": 3, "mean": 0.5, "per_seed": [0.5, 0.5, 0.5]}
    return {"variant": variant, "seeds": SEEDS, "diverged_seeds": [], "failed": {}, "rounds_to_target": [4, 4, 4], "final_acc": stat,
            "delta_acc": {"n": len(diffs), "per_seed": diffs}, **({} if kind is None else {"global_model": kind})}


def _outcome(claim: Claim, rows: list[dict[str, Any]]) -> reproduce.Outcome:
    cache = {reproduce._key(claim): CompareResult(None, rows, "")}  # the comparison's result, as if it had run
    return run_claim(claim, SEEDS, cache=cache, write=False)


def test_a_flagged_variant_is_said_in_the_measured_cell() -> None:
    claim = Claim("flexchill", "P beats FedAvg", "demo", "P", "FedAvg")
    rows = [_row("FedAvg", [0.0] * 3), _row("P", [0.03, 0.04, 0.05], PARTIAL_GLOBAL_MODEL)]
    o = _outcome(claim, rows)
    line = global_model_caveat(rows, "FedAvg")
    assert line is not None and line.startswith("global-model caveat: 'P' keeps a model of its own on each client")
    # the verdict itself is as before (diffs 3, 4, 5 points: [+1.52, +6.48] above 0); the cell ends with the table's line
    assert o.verdict == "reproduces" and o.measured.endswith(f"; {line}")
    assert f"; {line} | **reproduces** |" in format_outcomes([o])


def test_a_flagged_reference_is_said_where_a_rounds_part_reads_it() -> None:
    claim = Claim("flexchill", "P in fewer rounds", "demo", "P", "FedAvg", paper_speedup=2.0, reference="R")
    rows = [_row("FedAvg", [0.0] * 3), _row("P", [0.03, 0.04, 0.05]), _row("R", [0.0] * 3, NO_GLOBAL_MODEL)]
    o = _outcome(claim, rows)
    assert o.measured.endswith("; global-model caveat: 'R' keeps no global model: its accuracy is the mean of its clients' own models on "
                               "the global test set, not one model's accuracy (docs/baselines.md). The diff of such a row sets that number "
                               "against global models' accuracies; 'R' is the reference, so every row's rounds to target count to its best "
                               "accuracy, not a global model's.")
    without = Claim("flexchill", "P beats FedAvg", "demo", "P", "FedAvg")  # no rounds part: the reference's accuracy is not read
    assert "global-model caveat" not in _outcome(without, rows).measured


def test_trained_global_models_add_nothing() -> None:
    claim = Claim("flexchill", "P beats FedAvg", "demo", "P", "FedAvg")
    assert "global-model caveat" not in _outcome(claim, [_row("FedAvg", [0.0] * 3), _row("P", [0.03, 0.04, 0.05])]).measured


def test_a_flagged_baseline_is_said_in_the_measured_cell() -> None:
    # the paired difference reads the baseline's accuracy as much as the variant's: a FedRep/FedBN baseline's row is read
    claim = Claim("flexchill", "P beats B", "demo", "P", "B")
    rows = [_row("B", [0.0] * 3, PARTIAL_GLOBAL_MODEL), _row("P", [0.03, 0.04, 0.05])]
    o = _outcome(claim, rows)
    line = global_model_caveat(rows, "B")
    assert line is not None and line.startswith("global-model caveat: 'B' keeps a model of its own on each client")
    assert o.verdict == "reproduces" and o.measured.endswith(f"; {line}")


def test_a_rounds_claim_with_no_reference_reads_the_baseline_as_the_reference() -> None:
    # no reference: the rounds part's target is the baseline's best accuracy, so the baseline is said as the reference
    claim = Claim("flexchill", "P in fewer rounds", "demo", "P", "B", paper_speedup=2.0)
    rows = [_row("B", [0.0] * 3, NO_GLOBAL_MODEL), _row("P", [0.03, 0.04, 0.05])]
    o = _outcome(claim, rows)
    assert o.measured.endswith("; global-model caveat: 'B' keeps no global model: its accuracy is the mean of its clients' own models on "
                               "the global test set, not one model's accuracy (docs/baselines.md). 'B' is the baseline and the reference, so "
                               "every row's diff and rounds to target are against its number, not a global model's.")

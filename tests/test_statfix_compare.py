"""The comparison's tables where runs failed or ended with a non-finite number: what they say, and what table.json keeps.

Hand-made runs; every test here failed before its fix (statfix F3, F4, F5, F7, F8)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from chillfl import reproduce
from chillfl.report.compare import CompareResult, build_rows, build_seed_rows, format_seed_table, format_table
from chillfl.reproduce import CLAIMS, run_claim
from chillfl.runner import RunOutput
from chillfl.storage.results import summarize
from chillfl.sweeps.plan import Variant


def _out(acc: float, local: float | None = None, val: float | None = None) -> RunOutput:
    """A finished one-round run: global accuracy ``acc`` (its best, the target), local ``local``, validation ``val``."""
    record: dict[str, Any] = {"round": 1, "global_acc": acc, "global_loss": 1.0, "val_acc": acc if val is None else val}
    if local is not None:
        record |= {"local_acc": local, "local_val_acc": local}
    return RunOutput(None, [record], summarize([record]))


A, B, C = Variant("A", {}, None), Variant("B", {}, None), Variant("C", {}, None)


def test_a_one_seed_table_whose_reference_failed_has_no_target_and_no_never() -> None:
    # the reference B diverged: there is no target, so no variant can have missed it ("never") and there is no "-%"
    rows = build_rows([A, B], {"A": _out(0.5)}, B, A, failed={"B": "diverged at round 1"})
    table = format_table(rows, "B", "A")
    first = table.splitlines()[0]
    assert first.startswith("target: none (the reference B failed), so no rounds to target;") and "-%" not in first
    assert "never" not in table and "| A | 50.00 (+0.00) | 1.000 | - | - |" in table
    finished = format_table(build_rows([A, B], {"A": _out(0.5), "B": _out(0.6)}, B, A), "B", "A")
    assert finished.startswith("target = best global accuracy of B (the reference") and "60.00%" in finished.splitlines()[0]


def test_only_the_baseline_finished_says_where() -> None:
    result = CompareResult(None, [{"variant": "A", "baseline": True, "final_acc": 0.5, "delta_acc": None},
                                  {"variant": "B", "baseline": False, "final_acc": None, "delta_acc": None}], "")
    assert result.no_comparison() == "only the baseline A finished; the 1 other variant failed at every seed where the baseline finished"


def test_per_seed_differences_keep_their_seeds_and_reproduce_reads_them() -> None:
    # B failed at seed 1: its differences are at seeds 0 and 2, null at 1 (they were [0.1, 0.3], read as seeds 0 and 1)
    runs = {("A", s): _out(0.5) for s in range(3)} | {("B", 0): _out(0.6), ("B", 1): None, ("B", 2): _out(0.8)}
    rows = build_seed_rows([A, B], runs, [0, 1, 2], A, A, None, failed={("B", 1): "diverged at round 1"})
    delta = rows[1]["delta_acc"]
    assert delta["n"] == 2 and len(delta["per_seed"]) == 3 and delta["per_seed"][1] is None
    assert math.isclose(delta["per_seed"][0], 0.1) and math.isclose(delta["per_seed"][2], 0.3)
    assert rows[1]["final_acc"]["per_seed"][1] is None  # as the per-seed values have always been
    # reproduce's verdict reads such a row (as table.json holds it) from its paired seeds alone
    claim = next(c for c in CLAIMS if not c.tune and c.metric != "bytes")
    read_back = json.loads(json.dumps([{**rows[0], "variant": claim.baseline}, {**rows[1], "variant": claim.variant}]))
    outcome = run_claim(claim, [0, 1, 2], cache={reproduce._key(claim): CompareResult(None, read_back, "")}, write=False)
    assert outcome.per_seed == pytest.approx((10.0, 30.0))
    assert "sign holds 2/2" in outcome.measured and "rests on 2 of 3 seeds" in outcome.measured


def test_a_row_on_fewer_seeds_is_warned_of_even_without_a_difference_on_them() -> None:
    # the baseline A failed at seed 2: every difference pairs 2 seeds (said before), and A's own accuracy rests on 2 (unsaid)
    runs = {("A", 0): _out(0.5), ("A", 1): _out(0.6), ("A", 2): None} | {("B", s): _out(0.7) for s in range(3)}
    table = format_seed_table(build_seed_rows([A, B], runs, [0, 1, 2], A, A, None), "A", "A", None, "final", 0.0)
    warning = next(line for line in table.splitlines() if line.startswith("warning: 2 seeds"))
    assert warning.endswith("(the diff of 'B' pairs 2 of the 3 seeds: the others failed; "
                            "the accuracy of 'A' rests on 2 of the 3 seeds: the others failed)")
    # one variant over 3 seeds, one failed: no difference at all, and the row's accuracy rests on 2
    alone = build_seed_rows([A], {("A", 0): _out(0.5), ("A", 1): None, ("A", 2): _out(0.6)}, [0, 1, 2], A, A, None)
    lines = format_seed_table(alone, "A", "A", None, "final", 0.0).splitlines()
    assert "warning: 2 seeds: " in lines[2] and lines[2].endswith("(the accuracy of 'A' rests on 2 of the 3 seeds: the others failed)")
    # every run finished: no warning
    assert "warning" not in format_seed_table(build_seed_rows([A], {("A", s): _out(0.5) for s in range(3)}, [0, 1, 2], A, A, None),
                                              "A", "A", None, "final", 0.0)


def test_a_finished_runs_nan_local_accuracy_is_warned_of_and_named() -> None:
    # B finished at every seed, but its local accuracy at seed 0 is NaN: left out of the local statistics (2 of 3 seeds),
    # which the table said nowhere
    runs = {("A", s): _out(0.5, 0.6) for s in range(3)} | {("B", 0): _out(0.7, math.nan), ("B", 1): _out(0.7, 0.8), ("B", 2): _out(0.7, 0.9)}
    rows = build_seed_rows([A, B], runs, [0, 1, 2], A, A, None)
    assert rows[1]["final_local_acc"]["n"] == 2 and rows[1]["delta_local_acc"]["n"] == 2 and rows[1]["nonfinite_local_acc_seeds"] == [0]
    assert "nonfinite_local_acc_seeds" not in rows[0]
    table = format_seed_table(rows, "A", "A", None, "final", 0.0, local=True)
    lines = table.splitlines()
    assert any(line.startswith("warning: 2 seeds: ") and line.endswith(
        "(the local diff of 'B' pairs 2 of the 3 seeds: the others failed or ended with a non-finite local accuracy)") for line in lines)
    assert lines[-1].startswith("local accuracy caveat: 1 run finished with a non-finite final local accuracy (not diverged;")
    assert lines[-1].endswith(": 'B' at seed 0.") and lines[-2] == ""
    plain = format_seed_table(rows, "A", "A", None, "final", 0.0)  # no local columns: nothing of it to say
    assert "local" not in plain


def test_a_finished_point_with_a_nan_local_score_is_non_finite_not_diverged() -> None:
    # the scores of tests/test_statfix_tune.py: point 0 finished with a NaN local score at a seed, point 1 diverged at one
    scores = [math.nan, -math.inf, 0.5]
    runs = {("A", s): _out(0.5, 0.5) for s in range(2)}
    rows = build_seed_rows([A], runs, [0, 1], A, A, {"A": ({"client.lr": 0.3}, scores)})
    table = format_seed_table(rows, "A", "A", {"client.lr": [0.1, 0.2, 0.3]}, "local_final", 0.2)
    assert "| A | non-finite | diverged | 50.00 |" in table
    assert "(final round, mean over seeds; diverged = at one seed or more; non-finite = finished with a non-finite score at one seed or more)" in table
    # no point with a finite score at every seed: none chosen
    none = build_seed_rows([A], runs, [0, 1], A, A, {"A": ({"client.lr": 0.1}, scores[:2])})
    assert "none chosen" in format_seed_table(none, "A", "A", {"client.lr": [0.1, 0.2]}, "local_final", 0.2)


def test_table_json_is_strict_json_with_a_non_finite_score() -> None:
    """A tuned point that finished with a NaN score kept NaN in the rows (table.md says "non-finite"); table.json
    was written with a bare NaN literal, which is not JSON."""
    from chillfl.sweeps.run import table_json

    runs = {("A", s): _out(0.5, 0.5) for s in range(2)}
    rows = build_seed_rows([A], runs, [0, 1], A, A, {"A": ({"client.lr": 0.3}, [math.nan, -math.inf, 0.5])})
    text = table_json(rows)
    assert "NaN" not in text
    assert json.loads(text)[0]["validation_scores"] == [None, None, 0.5]


def test_an_infinite_difference_is_not_taken_for_zero() -> None:
    from chillfl.metrics.stats import paired_difference

    assert paired_difference([math.inf, 1.0, 2.0], [1.0, 1.0, 1.0]).summary.mean == math.inf
    assert paired_difference([1.0, 1.0, 1.0], [math.inf, 1.0, 1.0]).summary.mean == -math.inf

"""The single-seed comparison table's ``epsilon`` is the budget spent by the end, as summary.json's ``final_epsilon``:
the last record carrying it, infinite where that one is null (the accountant could not bound it), never an earlier,
smaller value (``last_value`` skipped the null)."""

from __future__ import annotations

import math

from chillfl.storage.results import spent_epsilon, summarize


def test_the_last_rounds_null_epsilon_is_unbounded_not_the_round_before() -> None:
    records = [{"round": 1, "epsilon": 284.4}, {"round": 2, "epsilon": 519.7}, {"round": 3, "epsilon": None}]
    assert spent_epsilon(records) == math.inf
    assert summarize(records)["final_epsilon"] == math.inf


def test_a_finite_last_epsilon_is_kept_and_no_key_is_none() -> None:
    assert spent_epsilon([{"epsilon": 1.5}, {"round": 2, "epsilon": 2.25}]) == 2.25
    assert spent_epsilon([{"round": 1}]) is None
    assert spent_epsilon([{"epsilon": 1.0}, {"round": 2}]) == 1.0  # a skipped round without the key keeps the last


def test_the_comparison_table_reads_the_same_epsilon() -> None:
    from chillfl.report.compare import build_rows
    from chillfl.runner import RunOutput
    from chillfl.sweeps.plan import Variant

    records = [{"round": 1, "global_acc": 0.5, "epsilon": 284.4}, {"round": 2, "global_acc": 0.6, "epsilon": None}]
    out = RunOutput(None, records, summarize(records))
    v = Variant("a", {})
    (row,) = build_rows([v], {"a": out}, v, v)
    assert row["epsilon"] == math.inf  # last_value gave 284.4, the round before the unbounded one

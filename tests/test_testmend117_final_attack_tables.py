"""The comparison tables and the HTML results table read a backdoor's final success as the reported round's alone
(``value_at_end``): where that round measured none, the cell is empty, not an earlier round's success, which is another
model's. Hand-made run outputs: round 1 measured 0.25, round 2 (the final one) measured none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_compare_attack import BACKDOOR, CLEAN, _cells, _out

from chillfl.config import RunConfig
from chillfl.report.compare import build_rows, build_seed_rows, format_seed_table, format_table
from chillfl.report.html import Run, _value
from chillfl.runner import RunOutput

UNMEASURED_END: list[dict[str, Any]] = [{"round": 1, "global_acc": 0.8, "attack_success_rate": 0.25},
                                        {"round": 2, "global_acc": 0.8, "attack_success_rate": None}]


def _unmeasured() -> RunOutput:
    """A backdoored run whose final round measured no success (its summary, as summarize writes it, has no key)."""
    return RunOutput(None, [dict(r) for r in UNMEASURED_END], {"final_global_acc": 0.8, "best_global_acc": 0.8, "final_global_loss": 1.0})


def test_the_one_seed_tables_success_cell_is_empty_when_the_final_round_measured_none() -> None:
    rows = build_rows([CLEAN, BACKDOOR], {CLEAN.label: _out(0.9, None), BACKDOOR.label: _unmeasured()}, CLEAN, CLEAN)
    assert "attack_success_rate" not in rows[1]  # was 0.25, round 1's
    assert "attack success" not in format_table(rows, CLEAN.label, CLEAN.label)  # no run measured one at its end: no column


def test_the_seed_tables_final_record_is_none_when_the_final_round_measured_none() -> None:
    # seeds 0 and 1 end unmeasured, seed 2 ends at 0.5: the cell is seed 2's alone, "50.00 ± -" (one value, no std)
    runs: dict[tuple[str, int], RunOutput | None] = {(CLEAN.label, s): _out(0.9, None) for s in (0, 1, 2)}
    runs.update({(BACKDOOR.label, 0): _unmeasured(), (BACKDOOR.label, 1): _unmeasured(), (BACKDOOR.label, 2): _out(0.8, [0.9, 0.5])})
    rows = build_seed_rows([CLEAN, BACKDOOR], runs, [0, 1, 2], CLEAN, CLEAN, None)
    assert rows[1]["attack_success_rate"]["per_seed"] == [None, None, 0.5]  # was [0.25, 0.25, 0.5]
    assert rows[1]["attack_success_rate"]["n"] == 1 and rows[1]["attack_success_rate"]["mean"] == 0.5
    only_unmeasured = {**runs, (BACKDOOR.label, 2): _unmeasured()}
    assert "attack_success_rate" not in build_seed_rows([CLEAN, BACKDOOR], only_unmeasured, [0, 1, 2], CLEAN, CLEAN, None)[1]
    table = format_seed_table(rows, CLEAN.label, CLEAN.label, None, "final", 0.0)
    assert _cells(table, "FedAvg, backdoor")[-1].startswith("50.00")


def test_the_html_results_tables_value_is_none_when_the_final_round_measured_none() -> None:
    # a summary without the key (written before summaries kept it, or unmeasured): read from the records, the last round's alone
    assert _value(Run(Path("s0"), RunConfig(seed=0), [dict(r) for r in UNMEASURED_END], {}), "final_attack_success_rate") is None

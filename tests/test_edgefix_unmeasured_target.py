"""A variant whose global accuracy was never a number gets "-" in the rounds-to-target column, not "never".

Why: "never" is a target a measured variant did not reach (docs/comparisons.md); a variant whose accuracy was NaN at
every evaluated round (FedAvgM at server_lr = 1e30) was counted among the seeds that could reach it.
"""

from __future__ import annotations

import math

from chillfl.report.compare import build_rows, build_seed_rows, format_seed_table, format_table
from chillfl.runner import RunOutput
from chillfl.sweeps.plan import Variant
from test_compare_seeds import _out

NAN = math.nan


def _nan_out() -> RunOutput:
    """A run that finished with a non-finite accuracy every round: its summary has no final or best accuracy."""
    return RunOutput(None, [{"round": 1, "global_acc": NAN}, {"round": 2, "global_acc": NAN}], {"final_global_loss": NAN})


def _rounds_cell(table: str, label: str) -> str:
    row = next(line for line in table.splitlines() if line.startswith(f"| {label} "))
    return row.split(" | ")[-1].rstrip(" |")


def test_seed_table_says_not_never_for_an_unmeasured_variant() -> None:
    ok, nan = Variant("ok", {}), Variant("nanglob", {})
    runs = {("ok", 0): _out(0.8, 0.8, 0.7, [0.5, 0.8]), ("ok", 1): _out(0.9, 0.9, 0.7, [0.6, 0.9]), ("nanglob", 0): _nan_out(), ("nanglob", 1): _nan_out()}
    rows = build_seed_rows([ok, nan], runs, [0, 1], ok, ok, None)
    assert rows[1]["unmeasured_seeds"] == [0, 1] and "unmeasured_seeds" not in rows[0]
    table = format_seed_table(rows, "ok", "ok", None, "final", 0.0)
    assert _rounds_cell(table, "nanglob") == "-", table  # was "never"
    assert _rounds_cell(table, "ok") == "2.0 (2/2)"


def test_a_mixed_variant_counts_only_its_measured_seeds() -> None:
    ok, mixed = Variant("ok", {}), Variant("mixed", {})
    # targets 0.8 and 0.9; mixed reaches 0.8 at round 2 at seed 0, and never measures a number at seed 1
    runs = {("ok", 0): _out(0.8, 0.8, 0.7, [0.5, 0.8]), ("ok", 1): _out(0.9, 0.9, 0.7, [0.6, 0.9]),
            ("mixed", 0): _out(0.8, 0.8, 0.7, [0.4, 0.8]), ("mixed", 1): _nan_out()}
    table = format_seed_table(build_seed_rows([ok, mixed], runs, [0, 1], ok, ok, None), "ok", "ok", None, "final", 0.0)
    assert _rounds_cell(table, "mixed") == "2.0 (1/1)", table  # was (1/2): the unmeasured seed counted as "could"
    # a measured seed that never reached its target still reads "never"
    runs[("mixed", 0)] = _out(0.5, 0.5, 0.7, [0.4, 0.5])
    table = format_seed_table(build_seed_rows([ok, mixed], runs, [0, 1], ok, ok, None), "ok", "ok", None, "final", 0.0)
    assert _rounds_cell(table, "mixed") == "never", table


def test_one_seed_table_too() -> None:
    ok, nan = Variant("ok", {}), Variant("nanglob", {})
    rows = build_rows([ok, nan], {"ok": _out(0.8, 0.8, 0.7, [0.5, 0.8]), "nanglob": _nan_out()}, ok, ok)
    table = format_table(rows, "ok", "ok")
    row = next(line for line in table.splitlines() if line.startswith("| nanglob "))
    assert "never" not in row, table

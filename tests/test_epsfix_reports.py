"""An unbounded privacy budget (a run whose last round's epsilon is null: ``summary.json``'s ``final_epsilon`` null,
:func:`~chillfl.storage.results.spent_epsilon` inf) reads ``inf`` in every table: the one over seeds printed
``inf ± nan``, and ``chillfl report`` a dash or ``nan``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from chillfl.config import RunConfig
from chillfl.report.compare import build_seed_rows, format_seed_table
from chillfl.report.html import Group, Run, _metrics_row
from chillfl.runner import RunOutput
from chillfl.storage.results import summarize
from chillfl.sweeps.plan import Variant

from test_reportfix_report import page_of, results_table, write_run

UNBOUNDED = [{"round": 1, "global_acc": 0.5, "epsilon": 3.0}, {"round": 2, "global_acc": 0.6, "epsilon": None}]


def bounded(epsilon: float) -> list[dict[str, Any]]:
    return [{"round": 1, "global_acc": 0.5, "epsilon": 3.0}, {"round": 2, "global_acc": 0.6, "epsilon": epsilon}]


def seed_table(*runs: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    v = Variant("a", {})
    outputs = {("a", s): RunOutput(None, recs, summarize(recs)) for s, recs in enumerate(runs)}
    rows = build_seed_rows([v], outputs, list(range(len(runs))), v, v, None)
    return rows[0], format_seed_table(rows, "a", "a", None, "final", 0.0)


def epsilon_cell(table: str) -> str:
    return table.splitlines()[-1].rstrip(" |").rsplit("| ", 1)[1]


def test_a_seed_with_an_unbounded_epsilon_prints_inf_without_a_std() -> None:
    row, table = seed_table(UNBOUNDED, bounded(4.0), bounded(5.0))
    assert epsilon_cell(table) == "inf"  # was "inf ± nan"
    stat = row["epsilon"]
    assert stat["mean"] == math.inf and stat["std"] is None and stat["ci_low"] is None and stat["ci_high"] is None
    assert stat["per_seed"] == [math.inf, 4.0, 5.0] and stat["n"] == 3


def test_bounded_seeds_keep_their_mean_and_std() -> None:
    row, table = seed_table(bounded(4.0), bounded(6.0))
    assert epsilon_cell(table) == "5.000 ± 1.414"
    assert row["epsilon"]["ci_low"] is not None


def epsilon_cells(page: str) -> list[str]:
    import re

    table = results_table(page)
    column = re.findall(r"<th[^>]*>(.*?)</th>", table).index("epsilon")
    return [re.findall(r"<td[^>]*>(.*?)</td>", row)[column] for row in re.findall(r"<tr>(.*?)</tr>", table)[1:]]


def test_the_report_shows_a_null_final_epsilon_as_inf(tmp_path: Path) -> None:
    run = write_run(tmp_path / "out" / "dp", UNBOUNDED, seed=0)
    assert json.loads((run / "summary.json").read_text())["final_epsilon"] is None  # as a run writes it
    assert epsilon_cells(page_of(run)) == ["inf"]  # was "nan" (the earlier round's 3.0 read as not this one)
    assert epsilon_cells(page_of(write_run(tmp_path / "other" / "dp", bounded(4.0), seed=0))) == ["4.0000"]


def test_a_group_with_an_unbounded_seed_is_inf_as_the_seed_table() -> None:
    def run(seed: int, epsilon: float | None) -> Run:
        recs = bounded(math.nan) if epsilon is None else bounded(epsilon)
        recs[-1]["epsilon"] = epsilon
        return Run(Path(f"r{seed}"), RunConfig(seed=seed), recs, {"final_epsilon": epsilon})

    columns = (("final_epsilon", "epsilon", False),)
    assert "<td>inf (1 of 3 runs)</td>" in _metrics_row(Group("g", [run(0, 4.0), run(1, 6.0), run(2, None)]), columns)
    assert "<td>5.0000 ± 1.4142</td>" in _metrics_row(Group("g", [run(0, 4.0), run(1, 6.0)]), columns)

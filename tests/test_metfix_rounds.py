"""Rounds (and bytes) to a target are those of the first *evaluated* round: under ``eval.every`` = k they may lag by up
to k - 1 rounds. The compare tables, ``table.json``, ``summary.json`` and the HTML report said nothing of it, and
``reproduce``'s rounds verdict compared such rounds as exact (a win by one round read as a tie)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from test_reproduce_verdicts import _outcome, _seed_row

from chillfl.cli import main
from chillfl.report.caveats import eval_interval_caveat
from chillfl.report.compare import build_rows, build_seed_rows, format_seed_table, format_table
from chillfl.config import load_config
from chillfl.report.html import Group, Run, _metrics_columns
from chillfl.reproduce import CLAIMS, NO_ROUNDS_VERDICT, format_outcomes
from chillfl.runner import RunOutput
from chillfl.storage.results import evaluation_interval, summarize


def records(accs: dict[int, float], rounds: int, skipped: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """One record per round: ``global_acc`` at the rounds in ``accs``, ``skipped`` rounds marked as the loop marks them."""
    out: list[dict[str, Any]] = []
    for r in range(1, rounds + 1):
        record: dict[str, Any] = {"round": r, "bytes_cumulative": 100 * r}
        if r in accs:
            record["global_acc"] = accs[r]
        if r in skipped:
            record["skipped"] = True
        out.append(record)
    return out


EVERY_2 = records({2: 0.5, 4: 0.8}, 4)  # eval.every = 2: rounds 1 and 3 not evaluated
EVERY_1 = records({1: 0.3, 2: 0.5, 3: 0.8, 4: 0.8}, 4)


def test_the_interval_is_read_from_the_records() -> None:
    assert evaluation_interval(EVERY_1) == 1 and evaluation_interval(EVERY_2) == 2
    assert evaluation_interval(records({3: 0.1, 6: 0.2, 7: 0.3}, 7)) == 3  # every 3 and the last
    assert evaluation_interval(records({1: 0.1, 3: 0.2}, 3, skipped=(2,))) == 1  # a skipped round trained nothing: hides nothing
    assert evaluation_interval([]) == 1


def test_summary_records_the_interval_beside_rounds_to_target() -> None:
    s = summarize(EVERY_2, target=0.7)
    assert s["rounds_to_target"] == 4 and s["target_eval_interval"] == 2
    assert summarize(EVERY_1, target=0.7)["target_eval_interval"] == 1
    assert "target_eval_interval" not in summarize(EVERY_2)  # no target: no rounds to it


@dataclass(frozen=True)
class V:
    label: str


def out(recs: list[dict[str, Any]]) -> RunOutput:
    return RunOutput(None, recs, summarize(recs) | {"final_loss": 1.0})


def test_the_one_seed_table_and_its_rows_say_the_rounds_are_first_evaluated() -> None:
    rows = build_rows([V("base"), V("var")], {"base": out(EVERY_2), "var": out(EVERY_2)}, V("base"), V("base"))
    assert [r["eval_interval"] for r in rows] == [2, 2]  # table.json's rows carry it
    table = format_table(rows, "base", "base")
    assert "rounds-to-target caveat: the global model was evaluated every 2 rounds in 'base', 'var' (eval.every)" in table
    assert "up to 1 round late" in table
    plain = build_rows([V("base"), V("var")], {"base": out(EVERY_1), "var": out(EVERY_1)}, V("base"), V("base"))
    assert [r["eval_interval"] for r in plain] == [1, 1] and "caveat" not in format_table(plain, "base", "base")


def test_the_seed_table_says_so_too() -> None:
    runs = {(label, s): out(EVERY_2 if label == "var" else EVERY_1) for label in ("base", "var") for s in (0, 1)}
    rows = build_seed_rows([V("base"), V("var")], runs, [0, 1], V("base"), V("base"), None)
    assert [r["eval_interval"] for r in rows] == [1, 2]
    table = format_seed_table(rows, "base", "base", None, "final", 0.0)
    assert "rounds-to-target caveat: the global model was evaluated every 2 rounds in 'var' (eval.every)" in table


def test_no_target_no_caveat() -> None:
    rows = [{"variant": "a", "target": None, "eval_interval": 5}, {"variant": "b", "target": [None, None], "eval_interval": 5}]
    assert eval_interval_caveat(rows) is None


def test_reproduce_gives_no_rounds_verdict_on_quantised_rounds() -> None:
    claim = CLAIMS[0]
    base, var = _seed_row("T=1", [0.0] * 3, [4, 2, 4]), _seed_row("T=0.05", [0.03, 0.04, 0.05], [2, 2, 2])
    o = _outcome(claim, [base | {"eval_interval": 2}, var | {"eval_interval": 2}], [0, 1, 2])
    assert o.rounds_verdict == NO_ROUNDS_VERDICT and "evaluated every 2 rounds (eval.every)" in o.measured
    assert "speed-up" not in o.measured and f"rounds: **{NO_ROUNDS_VERDICT}**" in format_outcomes([o])
    judged = _outcome(claim, [base | {"eval_interval": 1}, var], [0, 1, 2])  # every round evaluated (or not recorded): judged
    assert judged.rounds_verdict == "does not at this scale" and "speed-up 2.00x, 1.00x, 2.00x per seed" in judged.measured


def test_a_run_evaluated_every_2_rounds_records_it_in_its_summary(tmp_path: Path) -> None:
    config = tmp_path / "exp.toml"
    config.write_text(f'name = "e2"\nout_dir = "{tmp_path / "out"}"\n')
    args = ["dataset.name=digits", "federation.num_clients=4", "federation.clients_per_round=2", "federation.rounds=4", "model.name=mlp",
            "eval.client_split_size=20", "eval.every=2", "eval.target_accuracy=0.1", "eval.clients=none"]
    assert main(["run", str(config), "-q", *args]) == 0
    summary = json.loads((tmp_path / "out" / "e2" / "summary.json").read_text())
    assert summary["target_eval_interval"] == 2 and summary["rounds_to_target"] in (2, 4)


def test_the_html_results_column_says_first_evaluated_round() -> None:
    config = load_config(None, {})
    every_2 = Run(Path("a"), config, EVERY_2, summarize(EVERY_2, target=0.7))
    every_1 = Run(Path("b"), config, EVERY_1, summarize(EVERY_1, target=0.7))
    label = dict((k, name) for k, name, _ in _metrics_columns([Group("a", [every_2]), Group("b", [every_1])]))["rounds_to_target"]
    assert label == "rounds to target (first evaluated round; evaluated every 2 rounds, eval.every)"
    assert dict((k, name) for k, name, _ in _metrics_columns([Group("b", [every_1])]))["rounds_to_target"] == "rounds to target"

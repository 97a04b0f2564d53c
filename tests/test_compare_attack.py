"""A comparison's ``attack success %`` column (a backdoor's ``attack_success_rate`` at the final round) and its
``target`` line, which says which run's best accuracy is the target and why; on hand-made run outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.config import RunConfig
from chillfl.report.compare import build_rows, build_seed_rows, format_seed_table, format_table
from chillfl.report.html import Group, Run, _comparison_section, _metrics_columns, _metrics_row, _value
from chillfl.runner import RunOutput
from chillfl.storage.results import summarize
from chillfl.sweeps.plan import Variant, choose_reference

CLEAN, BACKDOOR = Variant("FedAvg, clean", {}), Variant("FedAvg, backdoor", {})


def _out(acc: float, asr: list[float] | None) -> RunOutput:
    """Two rounds; ``asr``: the attack's success in each round's record (None: not attacked, no such key)."""
    records = [{"round": i + 1, "global_acc": acc, **({} if asr is None else {"attack_success_rate": asr[i]})} for i in range(2)]
    return RunOutput(None, records, {"final_global_acc": acc, "best_global_acc": acc, "final_global_loss": 1.0})


def _seed_runs() -> dict[tuple[str, int], RunOutput | None]:
    # the backdoor's success at the final round, seeds 0, 1, 2: 0.10, 0.30, 0.20 (round 1's 0.9 must not count)
    return {
        ("FedAvg, clean", 0): _out(0.9, None), ("FedAvg, clean", 1): _out(0.9, None), ("FedAvg, clean", 2): _out(0.9, None),
        ("FedAvg, backdoor", 0): _out(0.8, [0.9, 0.10]), ("FedAvg, backdoor", 1): _out(0.8, [0.9, 0.30]),
        ("FedAvg, backdoor", 2): _out(0.8, [0.9, 0.20]),
    }


def _cells(table: str, label: str) -> list[str]:
    line = next(x for x in table.splitlines() if x.startswith(f"| {label} "))
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_seed_table_has_the_final_attack_success_as_mean_and_std() -> None:
    # mean (0.10 + 0.30 + 0.20) / 3 = 0.20; sample std sqrt(((-0.1)^2 + 0.1^2 + 0^2) / 2) = sqrt(0.01) = 0.10 -> "20.00 ± 10.00"
    rows = build_seed_rows([CLEAN, BACKDOOR], _seed_runs(), [0, 1, 2], CLEAN, CLEAN, None)
    assert "attack_success_rate" not in rows[0]
    assert rows[1]["attack_success_rate"]["mean"] == pytest.approx(0.20) and rows[1]["attack_success_rate"]["std"] == pytest.approx(0.10)
    assert rows[1]["attack_success_rate"]["per_seed"] == pytest.approx([0.10, 0.30, 0.20])
    table = format_seed_table(rows, CLEAN.label, CLEAN.label, None, "final", 0.0)
    header = next(x for x in table.splitlines() if x.startswith("| variant"))
    assert header.endswith("| rounds to target (reached) | attack success % |")
    assert _cells(table, "FedAvg, backdoor")[-1] == "20.00 ± 10.00" and _cells(table, "FedAvg, clean")[-1] == "-"
    assert "lower is better for the defender" in table


def test_a_failed_seed_leaves_the_attack_success_of_the_others() -> None:
    # seed 1 diverged: (0.10 + 0.20) / 2 = 0.15; std sqrt(((-0.05)^2 + 0.05^2) / 1) = sqrt(0.005) = 0.0707 -> "15.00 ± 7.07"
    runs = _seed_runs()
    runs[("FedAvg, backdoor", 1)] = None
    rows = build_seed_rows([CLEAN, BACKDOOR], runs, [0, 1, 2], CLEAN, CLEAN, None)
    assert rows[1]["attack_success_rate"]["n"] == 2
    assert _cells(format_seed_table(rows, CLEAN.label, CLEAN.label, None, "final", 0.0), "FedAvg, backdoor (seed 1: diverged)")[-1] == "15.00 ± 7.07"


def test_no_attack_no_column() -> None:
    runs = {(label, s): _out(0.9, None) for label in (CLEAN.label, BACKDOOR.label) for s in (0, 1, 2)}
    table = format_seed_table(build_seed_rows([CLEAN, BACKDOOR], runs, [0, 1, 2], CLEAN, CLEAN, None), CLEAN.label, CLEAN.label, None, "final", 0.0)
    assert "attack success" not in table
    assert "attack success" not in format_table(build_rows([CLEAN, BACKDOOR], {CLEAN.label: _out(0.9, None)}, CLEAN, CLEAN), CLEAN.label, CLEAN.label)


def test_the_one_seed_table_has_the_final_attack_success() -> None:
    # one seed: the final round's 0.25 -> "25.00" %; the clean run recorded none -> "-"
    outputs = {CLEAN.label: _out(0.9, None), BACKDOOR.label: _out(0.8, [0.9, 0.25])}
    rows = build_rows([CLEAN, BACKDOOR], outputs, CLEAN, CLEAN)
    table = format_table(rows, CLEAN.label, CLEAN.label)
    assert table.splitlines()[1].endswith("| rounds to target (speed-up) | attack success % |")
    assert _cells(table, "FedAvg, backdoor")[-1] == "25.00" and _cells(table, "FedAvg, clean")[-1] == "-"


def test_the_html_page_shows_the_column(tmp_path: Path) -> None:
    # a comparison folder's table.md is on the page as it printed it, column included
    rows = build_seed_rows([CLEAN, BACKDOOR], _seed_runs(), [0, 1, 2], CLEAN, CLEAN, None)
    (tmp_path / "table.md").write_text(format_seed_table(rows, CLEAN.label, CLEAN.label, None, "final", 0.0) + "\n", encoding="utf-8")
    page = "\n".join(_comparison_section(tmp_path))
    assert '<th class="l">attack success %</th>' in page and '<td class="l">20.00 ± 10.00</td>' in page

    # the results table: the runs' final records, mean ± sample std over the group's seeds (20.00 ± 10.00 as above)
    def run(seed: int, asr: list[float] | None) -> Run:
        out = _out(0.8, asr)
        return Run(Path(f"s{seed}"), RunConfig(seed=seed), out.records, out.summary)

    attacked = Group("backdoor", [run(0, [0.9, 0.10]), run(1, [0.9, 0.30]), run(2, [0.9, 0.20])])
    clean = Group("clean", [run(0, None)])
    columns = _metrics_columns([attacked, clean])
    assert columns[-1] == ("final_attack_success_rate", "attack success", True)
    assert _metrics_row(attacked, columns).endswith("<td>20.00 ± 10.00</td></tr>") and _metrics_row(clean, columns).endswith("<td>–</td></tr>")
    assert all(key != "final_attack_success_rate" for key, _, _ in _metrics_columns([clean]))


def test_the_target_line_names_the_baseline_when_it_sets_the_target() -> None:
    rows = build_rows([CLEAN, BACKDOOR], {CLEAN.label: _out(0.9, None), BACKDOOR.label: _out(0.8, None)}, CLEAN, CLEAN)
    assert format_table(rows, CLEAN.label, CLEAN.label).splitlines()[0] == (
        "target = best global accuracy of FedAvg, clean: 90.00%; differences and speed-ups relative to FedAvg, clean")


def test_the_target_line_says_why_a_run_other_than_the_baseline_sets_it() -> None:
    # privacy/epsilon-digits' case: compare.reference unset, baseline "FedAvg" (no temperature set); the rule takes the
    # highest *set* temperature, T = 0.5, so the target is the chilled variant's best accuracy, not the baseline's
    plain, chilled = Variant("FedAvg", {}), Variant("FedAvg + chilling T=0.5", {}, 0.5)
    ref, base = choose_reference([plain, chilled], None, "FedAvg", "compare.reference")
    assert (ref.label, base.label) == ("FedAvg + chilling T=0.5", "FedAvg")
    why = ("FedAvg + chilling T=0.5 (the reference, not the baseline FedAvg: --reference or compare.reference, "
           "else the variant with the highest set temperature, else the first)")
    rows = build_rows([plain, chilled], {"FedAvg": _out(0.9, None), "FedAvg + chilling T=0.5": _out(0.8, None)}, ref, base)
    assert format_table(rows, ref.label, base.label).splitlines()[0] == (
        f"target = best global accuracy of {why}: 80.00%; differences and speed-ups relative to FedAvg")
    runs = {(v.label, s): _out(0.8, None) for v in (plain, chilled) for s in (0, 1, 2)}
    seed_table = format_seed_table(build_seed_rows([plain, chilled], runs, [0, 1, 2], ref, base, None), ref.label, base.label, None, "final", 0.0)
    assert seed_table.splitlines()[1].endswith(f"; target = best accuracy of {why} at the same seed")


def test_the_summary_keeps_the_final_attack_success() -> None:
    # the last record's success (0.25), not round 1's 0.9 nor the best; a clean run's summary has no such key
    assert summarize(_out(0.8, [0.9, 0.25]).records)["final_attack_success_rate"] == 0.25
    assert "final_attack_success_rate" not in summarize(_out(0.9, None).records)
    # the HTML results table reads the summary first: a summary's value wins over the final record's
    run = Run(Path("s0"), RunConfig(seed=0), _out(0.8, [0.9, 0.25]).records, {"final_attack_success_rate": 0.5})
    assert _value(run, "final_attack_success_rate") == 0.5
    older = Run(Path("s1"), RunConfig(seed=1), _out(0.8, [0.9, 0.25]).records, {})  # written before summaries kept it
    assert _value(older, "final_attack_success_rate") == 0.25


def test_compare_help_states_the_default_reference_and_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    """``--reference`` said "(default: highest temperature)": a comparison of methods at no set temperature (FedAvg vs
    FedProx) takes the first variant, as the table's target line says; and the differences' baseline was not named."""
    from chillfl.cli import main

    plain, prox = Variant("FedAvg", {}), Variant("FedProx", {})
    assert [v.label for v in choose_reference([plain, prox], None)] == ["FedAvg", "FedAvg"]
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: the variant with the highest set temperature, else the first" in text
    assert "differences are to [compare] baseline (default: the variant that sets T = 1, else the first)" in text

"""A comparison says what it compared: its exit status when runs fail, and its few-seeds warning.

* every run failed -> exit 3 (``DIVERGED_EXIT``), one stderr line ``chillfl: every run failed (...)``;
* the baseline failed at every seed (another variant finished) -> nothing was compared: exit 3,
  one line ``chillfl: every comparison failed: ...`` (``chillfl run flexchill/table4-digits client.lr=50``
  used to exit 0 with T = 4 alone finishing, at chance accuracy);
* some runs failed, a difference to the baseline exists -> exit 0 and one line ``N of M runs did not finish``;
* fewer than 3 seeds -> the seed table carries a one-line warning that its intervals are uninformative;
* one seed and no tuning (FLex&Chill's Table 4) -> one stderr line says the table has no spread and no interval, and
  ``table.md`` opens with it.

The runs are tiny (digits, an MLP, 4 clients, 2 rounds); "diverged" is a client lr of 1e12 (a NaN loss in round 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.errors import DIVERGED_EXIT
from chillfl.metrics.stats import summarize
from chillfl.report.compare import MIN_SEEDS, CompareResult, few_seeds_warning, format_seed_table

TINY = """name = "tiny"
out_dir = "{out}"
[dataset]
name = "digits"
[partition]
name = "iid"
[model]
name = "mlp"
[federation]
num_clients = 4
clients_per_round = 2
rounds = 2
[client]
epochs = 1
batch_size = 16
lr = 0.05
[eval]
client_split_size = 20
[compare]
baseline = "base"
reference = "base"
[variants.base]
client = {{ lr = {base_lr} }}
[variants.other]
client = {{ lr = {other_lr} }}
{third}"""


def _compare(tmp_path: Path, capsys: pytest.CaptureFixture[str], base_lr: float, other_lr: float, third_lr: float | None = None) -> tuple[int, list[str]]:
    config = tmp_path / "tiny.toml"
    third = "" if third_lr is None else f"[variants.third]\nclient = {{ lr = {third_lr} }}\n"
    config.write_text(TINY.format(out=tmp_path / "results", base_lr=base_lr, other_lr=other_lr, third=third))
    code = main(["compare", str(config), "-q"])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.startswith("chillfl: ")]


def test_a_comparison_where_every_run_failed_exits_3_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _compare(tmp_path, capsys, 1e12, 1e12)
    assert code == DIVERGED_EXIT == 3
    summary = [line for line in lines if "every run failed" in line]
    assert len(summary) == 1 and summary[0].startswith("chillfl: every run failed (2 of 2; the first diverged at round 1)")


def test_a_comparison_where_only_the_baseline_finished_compares_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _compare(tmp_path, capsys, 0.05, 1e12)
    assert code == DIVERGED_EXIT
    assert "chillfl: every comparison failed: only the baseline base finished; the 1 other variant failed at every seed where the baseline finished" in lines


def test_a_comparison_whose_baseline_failed_compares_nothing_and_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _compare(tmp_path, capsys, 1e12, 0.05)
    assert code == DIVERGED_EXIT
    assert "chillfl: 1 of 2 runs did not finish: base (diverged at round 1)" in lines
    assert "chillfl: every comparison failed: the baseline failed at every seed, so no variant has a difference to it (finished: other)" in lines


def test_a_partly_failed_comparison_exits_0_and_says_how_many_runs_failed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, lines = _compare(tmp_path, capsys, 0.05, 1e12, 0.05)
    assert code == 0
    assert "chillfl: 1 of 3 runs did not finish: other (diverged at round 1)" in lines
    assert not any("every comparison failed" in line for line in lines)


def test_a_one_seed_comparison_says_on_stderr_that_its_table_has_no_interval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """FLex&Chill's Table 4 (one seed, no tuning) printed differences with nothing saying they could be the seed's."""
    code, lines = _compare(tmp_path, capsys, 0.05, 0.2)
    assert code == 0 and len(lines) == 1 and lines[0].startswith("chillfl: one seed (0): this table has no spread and no interval")
    from chillfl.sweeps.run import one_seed_warning

    assert lines[0] == f"chillfl: {one_seed_warning(0)}" and "--seeds 0,1,2" in lines[0]


def test_a_one_seed_comparison_writes_its_warning_into_its_table_file_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The warning was on stderr only: a reader of the saved folder (``table.md``, the HTML report made from it) saw the
    differences with nothing saying they could be the seed's. The printed table stays as it was."""
    from chillfl.report.html import render
    from chillfl.sweeps.run import one_seed_warning

    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(out=tmp_path / "results", base_lr=0.05, other_lr=0.2, third=""))
    assert main(["compare", str(config), "-q"]) == 0
    printed = capsys.readouterr().out
    folder = tmp_path / "results" / "tiny-compare"
    saved = (folder / "table.md").read_text(encoding="utf-8")
    assert saved.splitlines()[0] == f"warning: {one_seed_warning(0)}"
    assert "warning" not in printed and saved == f"warning: {one_seed_warning(0)}\n" + printed.split("results: ")[0].rstrip("\n") + "\n"
    assert one_seed_warning(0) in render([folder], models=False, partitions=False)
    assert main(["compare", str(config), "-q", "--seeds", "0,1,2"]) == 0  # seeds: no such line
    assert "one seed" not in (tmp_path / "results" / "tiny-compare-2" / "table.md").read_text(encoding="utf-8")


def _row(variant: str, delta: Any, final: Any = 0.5) -> dict[str, Any]:
    return {"variant": variant, "delta_acc": delta, "final_acc": final}


def test_no_comparison_on_given_rows() -> None:
    """Two rows with a difference (the baseline's own 0, and one other): compared; fewer: a reason."""
    result = CompareResult(None, [_row("T=1", 0.0), _row("T=0.5", 0.02), _row("T=0.05", None, None)], "")
    assert result.no_comparison() is None  # T=0.05 failed, T=0.5 vs T=1 stands
    baseline_failed = CompareResult(None, [_row("T=4", None), _row("T=1", None, None), _row("T=0.5", None, None)], "")
    assert baseline_failed.no_comparison() == "the baseline failed at every seed, so no variant has a difference to it (finished: T=4)"
    alone = CompareResult(None, [_row("T=1", 0.0), _row("T=0.5", None, None)], "")
    assert alone.no_comparison() == "only the baseline T=1 finished; the 1 other variant failed at every seed where the baseline finished"
    two_failed = CompareResult(None, [_row("T=1", 0.0), _row("T=0.5", None, None), _row("T=0.1", None, None)], "")
    assert two_failed.no_comparison() == "only the baseline T=1 finished; the 2 other variants failed at every seed where the baseline finished"
    assert CompareResult(None, [_row("T=1", 0.0)], "").no_comparison() is None  # one variant, finished
    assert CompareResult(None, [_row("T=1", None, None)], "").no_comparison() == "its one variant T=1 failed"
    assert CompareResult(None, [], "").no_comparison() is None  # a dry run: nothing ran


def _seed_rows(seeds: list[int]) -> list[dict[str, Any]]:
    empty: dict[str, Any] = {"final_acc": None, "delta_acc": None, "final_val_acc": None, "final_loss": None, "diverged_seeds": [], "failed": {}}
    return [{"variant": v, "seeds": seeds, "rounds_to_target": [None] * len(seeds), **empty} for v in ("T=1", "T=0.05")]


@pytest.mark.parametrize("seeds", [[0], [0, 1]])
def test_fewer_than_three_seeds_warn_that_the_intervals_say_nothing(seeds: list[int]) -> None:
    table = format_seed_table(_seed_rows(seeds), "T=1", "T=1", None, "final", 0.0)
    warnings = [line for line in table.splitlines() if line.startswith("warning:")]
    assert warnings == [few_seeds_warning(len(seeds))]
    assert f"run {MIN_SEEDS} seeds or more" in warnings[0]


def test_three_seeds_carry_no_warning() -> None:
    assert "warning:" not in format_seed_table(_seed_rows([0, 1, 2]), "T=1", "T=1", None, "final", 0.0)


def test_the_two_seed_warning_states_the_interval_width_it_warns_about() -> None:
    # n = 2: 95 % interval = mean +- t(0.975, 1) * std / sqrt(2) = mean +- 12.7062 / 1.41421 * std = mean +- 8.9846 std.
    # Values 0 and 1: mean 0.5, std sqrt(((0 - .5)^2 + (1 - .5)^2) / 1) = 0.70711 -> half-width 8.9846 * 0.70711 = 6.3531.
    s = summarize([0.0, 1.0])
    assert s.std is not None and s.low is not None and s.high is not None
    assert s.std == pytest.approx(0.70711, abs=1e-5)
    assert (s.low, s.high) == pytest.approx((0.5 - 6.353, 0.5 + 6.353), abs=1e-3)
    assert (s.high - s.mean) / s.std == pytest.approx(8.9846, abs=1e-4)
    assert "mean ± 8.98 std" in few_seeds_warning(2)


def test_the_readme_names_every_file_a_comparison_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every file of the comparison folder and of a run folder (2 seeds, as the demo's 3) is named in README.md."""
    pytest.importorskip("matplotlib")  # the figures are the `plots` extra's
    config = tmp_path / "tiny.toml"
    config.write_text(TINY.format(out=tmp_path / "results", base_lr=0.05, other_lr=0.05, third=""))
    assert main(["compare", str(config), "-q", "--seeds", "0,1"]) == 0
    folder = tmp_path / "results" / "tiny-compare"
    written = {p.name for p in folder.iterdir() if p.is_file()} | {p.name for p in (folder / "base-s0").iterdir()}
    assert {"table.md", "table.json", "curves.png", "accuracy_vs_bytes.png", "metrics.jsonl"} <= written
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert [name for name in sorted(written) if f"`{name}`" not in readme] == []


def _legends(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[list[str]]:
    """The legend texts of the next figures ``module`` finishes (finish_panels wrapped): one legend beside the panels."""
    seen: list[list[str]] = []
    original = module.finish_panels

    def capture(fig: Any, axes: Any, path: Any) -> None:
        original(fig, axes, path)
        assert all(ax.get_legend() is None for ax in axes)
        seen.extend([t.get_text() for t in legend.get_texts()] for legend in fig.legends)

    monkeypatch.setattr(module, "finish_panels", capture)
    return seen


def test_a_variant_that_diverged_at_every_seed_is_named_in_the_curves_legend(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """curves.png dropped a variant with no finished run without a word; its legend now names it."""
    import chillfl.plots.bands as bands
    import chillfl.plots.run as run

    seen = _legends(monkeypatch, run)
    assert _compare(tmp_path, capsys, 0.05, 1e12)[0] == DIVERGED_EXIT  # one seed: plot_curves
    assert seen == [["base", "other: no finished run"]]
    records = [{"round": 1, "global_acc": 0.5, "global_loss": 1.0}]
    seen = _legends(monkeypatch, bands)
    bands.plot_band_curves({"base": [records, records], "other": []}, tmp_path / "c.png")
    assert seen == [["base (n=2)", "other: no finished run"]]

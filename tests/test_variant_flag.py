"""``--variant LABEL``: a comparison's chosen rows, or one row's run at one seed, without a config of one's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chillfl.cli import main
from test_cli_late_signals import CONFIG as LATE

VARIANTS = """
[compare]
seeds = [1, 2]
baseline = "plain"
[variants.plain]
algorithm = {{ name = "fedavg" }}
[variants."prox (mu=0.1)"]
algorithm = {{ name = "fedprox", mu = 0.1 }}
[variants.fast]
client = {{ lr = 0.2 }}
"""
CONFIG = LATE + VARIANTS  # a 4-round MLP run on digits, named "late", with three variants


def _config(tmp_path: Path) -> str:
    path = tmp_path / "late.toml"
    path.write_text(CONFIG.format(out=(tmp_path / "out").as_posix()))
    return str(path)


def _accuracies(folder: Path) -> list[float]:
    return [json.loads(line)["global_acc"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_compare_keeps_only_the_chosen_variants_in_the_configs_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", _config(tmp_path), "--variant", "prox (mu=0.1)", "--variant", "plain", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4 runs: 2 variants x seeds 1, 2\n#   plain: plain-s1, plain-s2\n#   prox (mu=0.1): prox__mu0.1-s1" in out, out  # the config's order
    assert "[variants.plain.algorithm]" in out and '[variants."prox (mu=0.1)".algorithm]' in out and "variants.fast" not in out


@pytest.mark.parametrize(("labels", "said"), [
    (["nope"], "--variant: no variant 'nope' in late; its variants: 'plain', 'prox (mu=0.1)', 'fast'"),
    (["Plain"], "--variant: no variant 'Plain' in late (did you mean 'plain'?); its variants: 'plain', 'prox (mu=0.1)', 'fast'"),
    (["fast"], "--variant: late's [compare] baseline is 'plain': choose it too (--variant 'plain'), or set compare.baseline"),
])
def test_a_label_that_is_not_there_or_drops_the_baseline_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], labels: list[str], said: str,
) -> None:
    flags = [x for label in labels for x in ("--variant", label)]
    assert main(["compare", _config(tmp_path), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"chillfl: error: {said}"], err
    assert not (tmp_path / "out").exists()  # nothing written


def test_a_config_without_variants_has_none_to_choose(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.toml"
    path.write_text(LATE.format(out=(tmp_path / "out").as_posix()))
    assert main(["run", str(path), "--variant", "plain", "--seed", "1"]) == 2
    assert capsys.readouterr().err.strip() == "chillfl: error: --variant: late defines no [variants] to choose from"


def test_run_variant_seed_is_that_rows_run_of_the_comparison_bit_for_bit(tmp_path: Path) -> None:
    config = _config(tmp_path)
    assert main(["compare", config, "-q", "--variant", "plain", "--variant", "prox (mu=0.1)"]) == 0
    (compared,) = (tmp_path / "out").glob("late-compare*")
    (row,) = [p for p in compared.iterdir() if p.is_dir() and p.name.startswith("prox") and p.name.endswith("s2")]
    assert main(["run", config, "-q", "--variant", "prox (mu=0.1)", "--seed", "2"]) == 0
    (alone,) = (tmp_path / "out").glob("late-prox*")
    saved = (alone / "config.toml").read_text()
    assert 'name = "fedprox"' in saved and "seed = 2" in saved
    assert _accuracies(alone) == _accuracies(row)


def test_run_variant_overrides_come_after_the_variant(tmp_path: Path) -> None:
    """The variant sets client.lr = 0.2; the command line's 0.1 wins, and may set the variant's own method's options."""
    config = _config(tmp_path)
    assert main(["run", config, "-q", "--variant", "fast", "--seed", "1", "client.lr=0.1", "--dry-run"]) == 0
    assert main(["run", config, "-q", "--variant", "prox (mu=0.1)", "--seed", "1", "algorithm.mu=0.5", "--out", str(tmp_path / "o")]) == 0
    (folder,) = (tmp_path / "o").iterdir()
    assert "mu = 0.5" in (folder / "config.toml").read_text()


def _losses(folder: Path) -> list[dict[str, float]]:
    """Each round's client training losses: every client's float, bit for bit."""
    return [json.loads(line)["client_train_loss"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_the_demos_rows_are_chosen_by_label_and_one_row_at_one_seed_is_its_run_bit_for_bit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the demo's rows come from a grid (temperature=1,0.25,0.05), not [variants]: --variant chose nothing ("demo defines no
    # [variants] to choose from"); now its labels are its rows'
    assert main(["run", "--variant", "T=0.25", "--dry-run"]) == 0
    assert "# compare (not part of the config): 9 runs: 1 variant x seeds 0, 1, 2 x tuning client.lr = 0.01, 0.05, 0.2" in capsys.readouterr().out
    assert main(["run", "--variant", "T=2"]) == 2
    assert "no variant 'T=2' in demo (did you mean 'T=1'?); its variants: 'T=1', 'T=0.25', 'T=0.05'" in capsys.readouterr().err
    one_round = ["federation.rounds=1", "-q"]
    assert main(["run", "--variant", "T=0.25", "--seed", "0", "--out", str(tmp_path / "one"), *one_round]) == 0
    assert main(["compare", "demo", "--grid", "temperature=1,0.25,0.05", "--seeds", "0", "--tune", "client.lr=0.01", "--out", str(tmp_path / "all"), *one_round]) == 0
    alone, row = tmp_path / "one" / "demo-T0.25", tmp_path / "all" / "demo-compare" / "T0.25-lr0.01-s0"
    assert "value = 0.25" in (alone / "config.toml").read_text()
    assert _losses(alone) == _losses(row) and _accuracies(alone) == _accuracies(row)


def test_a_grid_says_it_sets_the_configs_variants_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--grid`` ran its rows alone, without a word that the config's three variants were dropped."""
    path = Path(_config(tmp_path))
    path.write_text(path.read_text().replace('baseline = "plain"\n', ""))
    main(["compare", str(path), "--grid", "client.lr=0.1,0.2", "--dry-run"])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("chillfl: note: --grid replaces the config's [variants] ('plain', 'prox (mu=0.1)', 'fast'): the comparison runs the grid's "
                      "rows alone"), err

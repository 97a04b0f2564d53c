"""The config system and CLI as a review found them: ``status`` of a finished run whose metrics.jsonl lost rounds, a
dry run's ``--shard`` of one run, a comparison folder without its plan, ``projection_dim`` in the resolved config,
the docs' full example and the README's quickstart, too many threads, and a late signal's folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import chillfl
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.models.projection import PROJECTION_OPTION

from docs_pages import blocks
from test_readme import _quickstart

ROOT = Path(__file__).resolve().parents[1]

ONE_RUN = """[dataset]
name = "digits"
[partition]
name = "dirichlet"
alpha = 0.3
[federation]
num_clients = 6
rounds = 3
clients_per_round = 3
"""


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, which must be one error line."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: "), err
    return err[0]


# ---------------------------------------------------------------- A: status of a finished run with a cut metrics.jsonl


@pytest.mark.parametrize(("rounds", "cells"), [
    ([7, 8], ["finished (metrics.jsonl lacks 6 of its rounds)", "2/8"]),  # `resume --force` over a cut metrics.jsonl
    (list(range(1, 9)), ["finished", "8/8"]),
    ([1, 2, 3, 4, 5, 6, 7, 8, 8], ["finished", "8/8"]),  # a round written twice is still one
])
def test_a_finished_run_whose_metrics_lack_rounds_says_so(tmp_path: Path, rounds: list[int], cells: list[str]) -> None:
    """The rounds column is the distinct rounds metrics.jsonl records (docs/usage.md); a finished run showed its
    summary's ``8/8`` though metrics.jsonl held two of them."""
    from chillfl.storage.run_state import run_state

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "summary.json").write_text(json.dumps({"final_global_acc": 0.5, "rounds": 8}))
    (tmp_path / "x" / "metrics.jsonl").write_text("".join(json.dumps({"round": r}) + "\n" for r in rounds))
    assert run_state(tmp_path, "x", 8).cells() == ["x", *cells, "50.00"]


# ---------------------------------------------------------------- B: --shard on one run, dry or not


@pytest.mark.parametrize("how", [["q.toml"], ["--variant", "T=1", "--seed", "0"]])
def test_a_dry_run_refuses_shard_of_one_run_as_the_run_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch, how: list[str]) -> None:
    """``chillfl run q.toml --shard 1/2 --dry-run`` said 0, the run itself 2: the dry run returned before the check."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.toml").write_text(ONE_RUN)
    name = "q" if how == ["q.toml"] else "demo-T1"
    for dry in (["--dry-run"], []):
        assert main(["run", *how, "--shard", "1/2", *dry, f"out_dir={tmp_path / 'out'}"]) == 2
        assert _error_line(capsys) == (f"chillfl: error: shard: {name} is one run: --shard splits a comparison's runs "
                                       "(its variants, seeds, tuning grid) over several processes")
    assert not (tmp_path / "out").exists()


def test_a_dry_run_of_a_comparisons_shard_is_still_a_dry_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "c.toml").write_text(ONE_RUN + "[compare]\nseeds = [0, 1]\n")
    assert main(["run", str(tmp_path / "c.toml"), "--shard", "1/2", "--dry-run", "-q"]) == 0


# ---------------------------------------------------------------- C: a comparison folder without its sweep.json


def test_a_comparison_without_its_plan_is_run_again_by_its_compare_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It said to `chillfl run .../config.toml`: that file has no [variants], seeds or grid (the flags gave them),
    so the command made one run, not the comparison."""
    folder = tmp_path / "gg" / "s-compare.partial"
    (folder / "T1-s0").mkdir(parents=True)
    (folder / "config.toml").write_text(ONE_RUN)
    (folder / "T1-s0" / "config.toml").write_text(ONE_RUN)
    assert main(["resume", str(folder)]) == 2
    line = _error_line(capsys)
    assert "sweep.json" in line and "its plan is gone" in line and "`chillfl compare` command that made it" in line, line
    assert "chillfl run" not in line, line


# ---------------------------------------------------------------- D: every model's option in the resolved config


def test_the_resolved_config_holds_every_models_projection_dim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``model.projection_dim`` (any model's, docs/reference.md) was in no resolved config unless set."""
    assert chillfl.make_config().to_dict()["model"][PROJECTION_OPTION] == 0
    assert chillfl.make_config(overrides={"model.projection_dim": 8}).to_dict()["model"][PROJECTION_OPTION] == 8
    (tmp_path / "q.toml").write_text(ONE_RUN)
    assert main(["run", str(tmp_path / "q.toml"), "--dry-run", "-q"]) == 0
    assert re.search(r"^\[model\]\n(?:\w+ = .*\n)*projection_dim = 0\n", capsys.readouterr().out, flags=re.M)


# ---------------------------------------------------------------- E: docs/configuration.md's full example


def test_the_full_example_of_the_configuration_page_dry_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Its [tune] selects on eval.validation, which the block set to 0.0: the dry run exited 2."""
    toml = [b for b in blocks((ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")) if b.language == "toml"]
    assert len(toml) == 1 and "[tune]" in toml[0].source
    monkeypatch.chdir(tmp_path)
    (tmp_path / "full.toml").write_text(toml[0].source)
    assert main(["run", "full.toml", "--dry-run"]) == 0, capsys.readouterr().err
    assert not (tmp_path / "results").exists()


# ---------------------------------------------------------------- F: the README's quickstart


def test_the_quickstart_runs_without_a_note(tmp_path: Path) -> None:
    """A newcomer's first run said FedChill's test rows steer training: the quickstart holds a validation split."""
    from chillfl.experiment import run_notes

    (tmp_path / "quickstart.toml").write_text(_quickstart())
    assert run_notes(load_config(tmp_path / "quickstart.toml"), None) == []


# ---------------------------------------------------------------- G: more threads than cores


def test_more_threads_than_usable_cores_is_a_note(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``threads = 64`` on 2 cores ran ~100x slower with nothing said."""
    from chillfl import experiment

    monkeypatch.setattr(experiment, "usable_cores", lambda: 2)
    (tmp_path / "q.toml").write_text("threads = 64\n" + ONE_RUN)
    notes = experiment.run_notes(load_config(tmp_path / "q.toml"), None)
    assert notes == ["note: threads = 64 is more than the 2 cores this process may use: its threads contend for them "
                     "and the run is much slower; set threads = 0 (torch's default) or at most 2"]
    for threads in (0, 1, 2):
        assert experiment.run_notes(load_config(tmp_path / "q.toml", {"threads": threads}), None) == []


# ---------------------------------------------------------------- I: a signal after the last round names the folder


def test_a_signal_after_the_last_round_names_the_folder_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """It said "its results are in out/s" (as typed), where every other lifecycle line names it absolute."""
    from chillfl.cli import _said_interrupted
    from chillfl.errors import InterruptedAfterRun

    monkeypatch.chdir(tmp_path)
    assert _said_interrupted(InterruptedAfterRun(Path("out") / "s"), "run") == 130
    assert capsys.readouterr().err.strip().splitlines() == [f"chillfl: interrupted; the run had completed: its results are in {tmp_path / 'out' / 's'}"]


@pytest.mark.parametrize(("typo", "hint"), [("clinet", " (did you mean 'client'?)"), ("nne", ""), ("fedchil", " (did you mean 'fedchill'?)")])
def test_list_options_suggests_tables_and_parts_not_none(typo: str, hint: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``chillfl list --options nonexist`` asked "did you mean 'none'?" (each part's off value), and ``clinet`` 'lie' (an
    attack), not the table ``client``: the tables are suggested too, ``none`` never."""

    assert main(["list", "--options", typo]) == 2
    assert capsys.readouterr().err.startswith(f"chillfl: error: list.options: {typo!r}{hint} is no ")

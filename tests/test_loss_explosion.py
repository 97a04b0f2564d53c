"""An exploding training loss that stays finite: one warning line, or exit 3 with ``--strict`` (``engine/health.py``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.engine.health import LOSS_CEILING, LOSS_GROWTH, LossWatch, loss_explosion
from chillfl.errors import LOSS_HINT, Diverged
from chillfl.runner import run_experiment

TINY = {
    "dataset.name": "digits",
    "model.name": "mlp",
    "federation.num_clients": 4,
    "federation.clients_per_round": 2,
    "federation.rounds": 2,
    "client.epochs": 1,
    "eval.client_split_size": 20,
}
BLOWS_UP = 'name = "run"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 4\nclients_per_round = 2\nrounds = 2\n'
"""With client.lr = 50: a round-1 training loss of ~1.6e4 (finite), then chance accuracy."""


def _config(folder: Path) -> str:
    path = folder / "lr50.toml"
    path.write_text(BLOWS_UP)
    return str(path)


def test_the_rule_by_hand():
    assert (LOSS_GROWTH, LOSS_CEILING) == (1e4, 1e3)  # the values docs/reproducibility.md and RunConfig.strict name
    assert loss_explosion(1000.5, None) == "is above 1000"
    assert loss_explosion(1000.0, None) is None  # the ceiling itself is allowed
    # 2.3 in round 1: 2.3 * 1e4 = 23000 would be above the ceiling anyway; with round 1 at 0.05: 0.05 * 1e4 = 500
    assert loss_explosion(500.0, 0.05) == "is 1e+04 times round 1's 0.05"
    assert loss_explosion(499.0, 0.05) is None
    assert loss_explosion(5.0, 0.0) is None  # a round-1 loss of 0 has no ratio; only the ceiling applies


def test_the_watch_warns_once_and_strict_raises(caplog):
    watch = LossWatch(False)
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        for rnd, loss in enumerate([0.05, 0.04, 600.0, 700.0], start=1):
            watch.observe({"round": rnd, "train_loss": loss})
    assert [r.getMessage() for r in caplog.records] == [
        f"round 3: training loss 600 is 1.2e+04 times round 1's 0.05 ({LOSS_HINT}); the run goes on (with strict = true, or --strict, it would stop here)"
    ]
    strict = LossWatch(True, [{"round": 1, "train_loss": 0.05}])  # a resumed run: round 1 comes from its metrics
    strict.observe({"round": 2, "clients": [], "skipped": True})  # a skipped round has no loss
    with pytest.raises(Diverged) as err:
        strict.observe({"round": 3, "train_loss": 600.0})
    assert err.value.round == 3 and "1.2e+04 times round 1's 0.05" in err.value.what


def test_a_local_loss_above_the_ceiling_warns_once_and_strict_raises(caplog):
    """The clients' own models (a personal model trained beside the reply's: Ditto's v_k) can blow up while the training
    loss stays healthy; before, nothing said so."""
    watch = LossWatch(False)
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        for rnd, local in enumerate([0.9, 1000.0, 2.5e5, 3e5], start=1):
            watch.observe({"round": rnd, "train_loss": 0.5, "local_loss": local})
    assert [r.getMessage() for r in caplog.records] == [
        f"round 3: local loss 2.5e+05 (the clients' own models on their own splits) is above 1000 ({LOSS_HINT}); the run goes on "
        "(with strict = true, or --strict, it would stop here)"
    ]
    with pytest.raises(Diverged) as err:
        LossWatch(True).observe({"round": 1, "train_loss": 0.5, "local_loss": 1000.5})
    assert err.value.round == 1 and err.value.what.startswith("local loss 1e+03 ")


def test_a_healthy_run_says_nothing(caplog):
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        run_experiment(load_config(None, {**TINY, "client.lr": 0.05}), write=False, progress=False)
    assert not [r for r in caplog.records if "training loss" in r.getMessage()]


def test_lr_50_warns_in_one_line_and_exits_0(tmp_path: Path, capsys):
    assert main(["run", _config(tmp_path), "-q", "--out", str(tmp_path / "out"), "client.lr=50"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: round 1: training loss ") and f" is above 1000 ({LOSS_HINT})" in err[0], err
    assert (tmp_path / "out" / "run" / "metrics.jsonl").is_file()


def test_lr_50_with_strict_is_a_divergence(tmp_path: Path, capsys):
    assert main(["run", _config(tmp_path), "-q", "--strict", "--out", str(tmp_path / "out"), "client.lr=50"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: diverged: round 1: training loss ") and err[0].endswith(f"partial results in {tmp_path / 'out' / 'run.failed'}"), err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["run.failed"]
    assert (tmp_path / "out" / "run.failed" / "metrics.jsonl").read_text() == ""  # the exploded round is not written
    assert "strict = true" in (tmp_path / "out" / "run.failed" / "config.toml").read_text()


def test_a_comparisons_warning_names_its_run(tmp_path: Path, capsys):
    """In a comparison the line read "chillfl: round 1: training loss ...": with -q nothing said which of its runs
    exploded (its "diverged" lines name theirs). A single run's line stays as it was (the test above)."""
    assert main(["compare", _config(tmp_path), "-q", "--out", str(tmp_path / "out"), "--grid", "client.lr=0.05,50", "--seeds", "0,1"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "training loss" in line]
    assert [line.split(": round 1: training loss ")[0] for line in warned] == ["chillfl: lr50-s0", "chillfl: lr50-s1"], warned

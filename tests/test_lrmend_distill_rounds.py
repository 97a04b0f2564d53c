"""The soft-label clients' distillation is counted before the run over the rounds in which clients distil: from round 2
on (they distil the previous round's soft-labels), so a one-round run, which never runs the phase, is not refused over
it, and the refusal says "from round 2 on", not "in every round" (rev118b finding 1).

Hand-worked values (tests/test_lrstage_stage_lr_floor.py): the clients' distillation of 6 epochs over the 100 public rows
in one batch of 2048 takes 6 steps from ``distill_lr`` 0.1; at ``lr_gamma`` 4e-8 step 6 trains at 0.1 * 4e-8^5 =
1.02e-38, below 2^-126 = 1.1755e-38. The server's 1 epoch and the clients' 1-step training stay at their lr.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

from test_lrstage_stage_lr_floor import DSFL, one_line

SIX = DSFL.replace("distill_epochs = 2", "distill_epochs = 6").replace("server_epochs = 6", "server_epochs = 1")


def run(tmp_path: Path, rounds: int, *more: str) -> int:
    path = tmp_path / "c.toml"
    path.write_text(SIX)
    return main(["run", str(path), f"out_dir={tmp_path / 'out'}", "client.lr_gamma=4e-8", f"federation.rounds={rounds}", "--quiet", *more])


def test_one_round_never_distils_on_the_clients_so_it_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, 1) == 0, capsys.readouterr().err


@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry-run"])
def test_two_rounds_are_refused_from_round_2_on(tmp_path: Path, capsys: pytest.CaptureFixture[str], dry: bool) -> None:
    assert run(tmp_path, 2, *(["--dry-run"] if dry else [])) == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_gamma: local step 6 of the 6 steps of the distillation.distill_epochs training (6 epochs over "
                           "the 100 public rows a round sends in batches of 2048, client.lr_schedule_over = 'steps', from its own lr 0.1) from round 2 "
                           "on would train at lr 0.1 * 4e-08^5 = 1.02e-38"), line
    assert "in every round" not in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_stage_from_a_later_round_counts_from_that_round() -> None:
    # a stage of 2 steps at the round's lr 0.05, gamma 1e-37: step 2 at 5e-39 in every round; counted from round 2, the
    # refusal names round 2, and a one-round run never trains it
    from chillfl.config import ClientConfig
    from chillfl.errors import ConfigError
    from chillfl.training.schedule import StageSteps

    client = ClientConfig(batch_size=2048, lr=0.05, lr_schedule="step", lr_schedule_over="steps", lr_gamma=1e-37)
    stage = StageSteps(2, "x.epochs", 2048, client.optim(), 10, "10 rows")
    client.check_stage_lr_floor(1, stage, "client", first=2)
    for first, named in ((1, 1), (2, 2)):
        with pytest.raises(ConfigError) as err:
            client.check_stage_lr_floor(3, stage, "client", first=first)
        assert f"in round {named} of federation.rounds = 3 would train at lr 0.05 * 1e-37^1 = 5e-39" in err.value.message, err.value.message

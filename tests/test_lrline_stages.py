"""A method's stage with its own epochs is refused before the run where the schedule over local steps takes one of its
steps below float32's smallest normal lr: each personalising half declares its stages (``planned_stages``, the public
:class:`~chillfl.extend.PlansStages`), and the check before the run counts their steps, naming the stage's option.

Why: the stage ran the schedule further down than ``client.epochs`` does, and was refused only when it first trained:
in round 1, or, with an lr decayed over rounds, hours in, leaving a checkpointed run's ``.partial`` folder.

Hand-worked values (as tests/test_lrstage_stage_lr_floor.py): ``client.batch_size = 2048`` holds each client's 360 rows
in one batch, so E epochs take E steps; ``lr_gamma = 4e-8``, ``lr_step_size = 1``: step k (0-based) trains at
lr * 4e-8^k. A stage of 6 epochs: step 6 at lr * 1.024e-37, below 2^-126 = 1.1755e-38 from lr 0.05 (5.12e-39) and
0.1 (1.02e-38). The run's own training (1 epoch, 1 step) stays at lr.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

from test_lrstage_stage_lr_floor import BASE, DSFL, one_line

CASES = {
    "ditto": ('name = "ditto"\npersonal_epochs = 6\n', "algorithm.personal_epochs", "the largest client's 360 rows", "0.05 * 4e-08^5 = 5.12e-39"),
    "fedavg_ft": ('name = "fedavg_ft"\nfinetune_epochs = 6\nfinetune_lr = 0.1\n', "algorithm.finetune_epochs",
                  "the largest client's 360 rows in batches of 2048, client.lr_schedule_over = 'steps', from its own lr 0.1) in every round",
                  "0.1 * 4e-08^5 = 1.02e-38"),
    "fedbabu": ('name = "fedbabu"\nfinetune_epochs = 6\n', "algorithm.finetune_epochs", "the largest client's 360 rows", "0.05 * 4e-08^5 = 5.12e-39"),
    "fedpac": ('name = "fedpac"\nhead_epochs = 6\nhead_lr = 0.1\n', "algorithm.head_epochs", "from its own lr 0.1) in every round",
               "0.1 * 4e-08^5 = 1.02e-38"),
    "pfedme": ('name = "pfedme"\ninner_steps = 6\npersonal_lr = 0.1\n', "algorithm.inner_steps", "at most 360 rows a training", "0.1 * 4e-08^5 = 1.02e-38"),
}


def run(tmp_path: Path, algorithm: str, gamma: float, *more: str) -> int:
    path = tmp_path / "c.toml"
    path.write_text(BASE + "[algorithm]\n" + algorithm)
    return main(["run", str(path), f"out_dir={tmp_path / 'out'}", f"client.lr_gamma={gamma:g}", "--quiet", *more])


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_stage_below_the_floor_is_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    table, option, over, formula = CASES[name]
    assert run(tmp_path, table, 4e-8) == 2
    line = one_line(capsys)
    assert line.startswith(f"chillfl: error: client.lr_gamma: local step 6 of the 6 steps of the {option} training (6 epochs over "), line
    assert over in line and f"would train at lr {formula}" in line and line.endswith(f"raise client.lr_gamma or lower {option}"), line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # nothing written


def test_a_stage_refused_in_a_late_round_says_the_round_and_the_decay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Ditto's 3 personal epochs from the round's lr 0.05 * 1e-12^t: step 3 of round t at 0.05 * 1e-12^t * 4e-8^2 =
    # 8e-17 * 1e-12^t: above the floor up to t = 1 (8e-29), below at t = 2 (8e-41), round 3; lr_decay takes it there
    # (1e-24 <= the step's 1.6e-15), so it is the field named. The clients' own 1 step stays at 5e-26 in round 3.
    assert run(tmp_path, 'name = "ditto"\npersonal_epochs = 3\n', 4e-8, "client.lr_decay=1e-12", "federation.rounds=4", "checkpoint.every=1") == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_decay: local step 3 of the 3 steps of the algorithm.personal_epochs training "), line
    assert "in round 3 of federation.rounds = 4 would train at lr 0.05 * 1e-12^2 * 4e-08^2 = 8e-41" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # not a round-2 .partial folder


@pytest.mark.parametrize("name", ["fedrep", "ditto", "pfedme"])
def test_just_above_the_floor_is_not_refused_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str) -> None:
    # 5 stage steps: step 5 at 0.1 * 2.56e-30, far above; --dry-run would not build the run, so one round runs
    table = {"fedrep": 'name = "fedrep"\nhead_epochs = 5\n', "ditto": 'name = "ditto"\npersonal_epochs = 5\n',
             "pfedme": 'name = "pfedme"\ninner_steps = 5\npersonal_lr = 0.1\n'}[name]
    assert run(tmp_path, table, 4e-8) == 0, capsys.readouterr().err


def test_the_seam_is_public() -> None:
    from chillfl.aggregation.fedrep import FedRepClient
    from chillfl.extend import PlannedStage, PlansStages

    assert issubclass(FedRepClient, PlansStages)
    assert PlannedStage(0, "head_epochs").lr is None


def test_dry_run_refuses_a_stage_with_the_same_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # --dry-run builds every part (the embedded digits are here), so it counts the stage's steps as the run does
    assert run(tmp_path, 'name = "fedrep"\nhead_epochs = 6\n', 4e-8, "--dry-run") == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_gamma: local step 6 of the 6 steps of the algorithm.head_epochs training (6 epochs over "), line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("dry", [False, True], ids=["run", "dry-run"])
def test_the_clients_distillation_is_refused_before_any_training(tmp_path: Path, capsys: pytest.CaptureFixture[str], dry: bool) -> None:
    # DS-FL's clients distil from round 2 on: 6 epochs over the 100 public rows in one batch, from distill_lr 0.1: step 6
    # at 0.1 * 4e-8^5 = 1.02e-38, below the floor; the server's 1 epoch is not. Was: refused in round 2, round 1 written (.partial).
    path = tmp_path / "c.toml"
    path.write_text(DSFL.replace("distill_epochs = 2", "distill_epochs = 6").replace("server_epochs = 6", "server_epochs = 1"))
    args = ["client.lr_gamma=4e-8", "federation.rounds=3", "--quiet", *(["--dry-run"] if dry else [])]
    assert main(["run", str(path), f"out_dir={tmp_path / 'out'}", *args]) == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_gamma: local step 6 of the 6 steps of the distillation.distill_epochs training (6 epochs over "
                           "the 100 public rows a round sends in batches of 2048, client.lr_schedule_over = 'steps', from its own lr 0.1) from round 2 on "
                           "would train at lr 0.1 * 4e-08^5 = 1.02e-38"), line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

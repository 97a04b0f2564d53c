"""A schedule over local steps is refused where a training takes it below float32's smallest normal lr, whichever
training that is: a method's stage with its own epochs (FedRep's head) or a distillation phase (DS-FL's server model),
not only the ``client.epochs`` training. Both are declared (a personalising half's ``planned_stages``, the soft-label
protocol's server phase), so the check before the run refuses them (tests/test_lrline_stages.py: the other methods).

Why: ``client.lr_schedule_over = "steps"`` runs the schedule over each training's own planned steps; FedRep's
``head_epochs`` and the soft-label server's ``server_epochs`` took the same curve further down, and those steps trained at
a subnormal or 0 lr, exit 0 and no word.

Hand-worked values: ``client.batch_size = 2048`` holds every client's rows and the public subset of 100 in one batch, so
a training of E epochs takes E steps. ``lr_gamma = g``, ``lr_step_size = 1``: step k (0-based) trains at lr * g^k.
6 steps from lr 0.05: the last, 0.05 * g^5, is 0.05 * 1.024e-37 = 5.12e-39 at g = 4e-8 (below 2^-126 = 1.1755e-38; the
step before, 0.05 * 2.56e-30, is not) and 0.05 * 3.125e-37 = 1.5625e-38 at g = 5e-8 (above). From DS-FL's
``distill_lr`` 0.1 (the server's lr when ``server_lr`` is unset): 1.024e-38 at g = 4e-8 (below), 3.125e-38 at 5e-8.
The client's own training (1 step) and its distillation (2 steps) stay above the floor at either g.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main

BASE = ('name = "s"\nseed = 0\n[dataset]\nname = "digits"\n[partition]\nname = "iid"\n[model]\nname = "mlp"\n'
        "[federation]\nnum_clients = 4\nclients_per_round = 4\nrounds = 1\n"
        '[client]\nepochs = 1\nbatch_size = 2048\nlr = 0.05\nlr_schedule = "step"\nlr_schedule_over = "steps"\nlr_step_size = 1\n')
FEDREP = BASE + '[algorithm]\nname = "fedrep"\nhead_epochs = 6\n'
DSFL = BASE + ('[distillation]\nmethod = "dsfl"\npublic_size = 400\nsubset_size = 100\ndistill_epochs = 2\ndistill_lr = 0.1\n'
               "server_epochs = 6\ntemperature = 0.1\n")


def run(tmp_path: Path, text: str, gamma: float, executor: str = "sequential") -> int:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return main(["run", str(path), f"out_dir={tmp_path / 'out'}", f"client.lr_gamma={gamma:g}", f"executor={executor}", "--quiet"])


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])  # the vectorised chunks step at their own rates, not through train_client
def test_fedrep_head_stage_below_the_floor_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], executor: str) -> None:
    assert run(tmp_path, FEDREP, 4e-8, executor) == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_gamma: local step 6 of the 6 steps of the algorithm.head_epochs training (6 epochs over "), line
    assert "would train at lr 0.05 * 4e-08^5 = 5.12e-39, below float32's smallest normal number" in line
    assert not any((tmp_path / "out").glob("*"))  # refused in round 1, before its first checkpoint: no folder left


def test_soft_label_server_distillation_below_the_floor_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path, DSFL, 4e-8) == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_gamma: local step 6 of the 6 steps of the distillation.server_epochs training (6 epochs over the 100 "
                           "public rows a round draws "), line
    assert "would train at lr 0.1 * 4e-08^5 = 1.02e-38, below float32's smallest normal number" in line


@pytest.mark.parametrize("text", [FEDREP, DSFL], ids=["fedrep", "dsfl"])
def test_just_above_the_floor_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    assert run(tmp_path, text, 5e-8) == 0, capsys.readouterr().err


def test_refused_in_a_later_round_before_anything_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # lr_decay 0.5: round 1's head stage ends at 0.05 * 5e-8^5 = 1.5625e-38 (above), round 2's at 0.025 * 3.125e-37 = 7.81e-39;
    # the stage is declared (PlansStages), so the check before the run refuses it: no folder, not round 1's .partial
    path = tmp_path / "c.toml"
    path.write_text(FEDREP)
    args = ["client.lr_gamma=5e-8", "client.lr_decay=0.5", "federation.rounds=2", "checkpoint.every=1", "--quiet"]
    assert main(["run", str(path), f"out_dir={tmp_path / 'out'}", *args]) == 2
    line = one_line(capsys)
    assert line.startswith("chillfl: error: client.lr_gamma: local step 6 of the 6 steps of the algorithm.head_epochs training (6 epochs over "), line
    assert "in round 2 of federation.rounds = 2 would train at lr 0.05 * 0.5^1 * 5e-08^5 = 7.81e-39" in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

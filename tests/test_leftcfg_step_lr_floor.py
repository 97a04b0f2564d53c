"""An lr schedule over local steps whose lr falls below float32's smallest normal number within a round is refused once
the data is partitioned (a round's local steps are known only then), as :meth:`ClientConfig.check_lr_floor` refuses one
over rounds.

Why: ``client.lr_schedule_over = "steps"`` with a small ``lr_gamma`` (or cosine's end times ``lr_decay``'s) took a
round's later steps to 0 or a subnormal, and the run trained nothing from there on, exit 0 and no word.

The hand-worked values: a client of 1600 rows in batches of 16 takes 100 steps an epoch (1601: still 100, the trailing
single row merged; 1602: 101); cosine's factor at step s of 100 (lr_min 0) is (1 + cos(pi s / 100)) / 2, at s = 99
sin^2(pi / 200) = 2.467e-4; float32's smallest normal number is 2^-126 = 1.1755e-38.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import ClientConfig
from chillfl.errors import ConfigError


def step_schedule(**kw: object) -> ClientConfig:
    return ClientConfig(**{"lr": 0.05, "batch_size": 16, "lr_schedule": "step", "lr_schedule_over": "steps", **kw})  # type: ignore[arg-type]


def cosine(**kw: object) -> ClientConfig:
    return ClientConfig(**{"lr": 0.05, "batch_size": 16, "lr_schedule": "cosine", "lr_schedule_over": "steps", **kw})  # type: ignore[arg-type]


def test_step_gamma_within_one_round() -> None:
    # 0.05 * 1e-10^k: k = 3 gives 5e-32, k = 4 gives 5e-42, below the floor: step s = 4, the 5th; 1600 rows: 100 steps
    with pytest.raises(ConfigError) as err:
        step_schedule(lr_gamma=1e-10).check_step_lr_floor(3, 1600, "client")
    assert err.value.field == "client.lr_gamma"
    assert err.value.message.startswith("local step 5 of the 100 a round takes (client.epochs = 1 over the largest client's 1600 rows")
    assert "in round 1 of federation.rounds = 3 would train at lr 0.05 * 1e-10^4 = 5e-42" in err.value.message
    assert "raise client.lr_gamma or lower client.epochs" in err.value.message


def test_decay_and_step_gamma_together() -> None:
    # round t, step s: 0.05 * 0.1^t * 0.1^(s // 10); the last step (s = 99) gives 5e-11 * 0.1^t, below the floor first at
    # t = 28 (5e-39; t = 27: 5e-38); in that round 5e-30 * 0.1^k is below first at k = 9, step s = 90: the 91st
    with pytest.raises(ConfigError) as err:
        step_schedule(lr_decay=0.1, lr_gamma=0.1, lr_step_size=10).check_step_lr_floor(29, 1600, "client")
    assert err.value.field == "client.lr_decay"  # 0.1^28 takes it further down than 0.1^9
    assert err.value.message.startswith("local step 91 of the 100 ")
    assert "in round 29 of federation.rounds = 29 would train at lr 0.05 * 0.1^28 * 0.1^9 = 5e-39" in err.value.message
    step_schedule(lr_decay=0.1, lr_gamma=0.1, lr_step_size=10).check_step_lr_floor(28, 1600, "client")  # last round t = 27: 5e-38


def test_epochs_count_the_steps() -> None:
    # 2 epochs of 1600 rows: 200 steps, s // 10 up to 19; 0.05 * 0.01^k below the floor first at k = 19 (5e-40; 18: 5e-38)
    with pytest.raises(ConfigError, match=r"^client\.lr_gamma: local step 191 of the 200 .*client\.epochs = 2 "):
        step_schedule(epochs=2, lr_gamma=0.01, lr_step_size=10).check_step_lr_floor(1, 1600, "client")
    step_schedule(epochs=1, lr_gamma=0.01, lr_step_size=10).check_step_lr_floor(1, 1600, "client")  # 100 steps: 0.05 * 0.01^9 = 5e-20


def test_cosine_end_names_lr_min() -> None:
    # lr 1e-36, decay 1: factor(s) < 1.1755e-38 / 1e-36 = 0.011755 first at s = 94 (0.00886; s = 93: 0.01204): the 95th
    with pytest.raises(ConfigError) as err:
        cosine(lr=1e-36).check_step_lr_floor(5, 1600, "client")
    assert err.value.field == "client.lr_min"
    assert err.value.message.startswith("local step 95 of the 100 ") and "in round 1 of federation.rounds = 5" in err.value.message


def test_cosine_with_decay_names_lr_decay() -> None:
    # last step 0.05 * 0.1^t * 2.467e-4: 1.23e-39 at t = 34 (t = 33: 1.23e-38, above); in round t = 34 (lr 5e-36) the factor
    # must fall below 0.0023510: first at s = 97 (0.002219; s = 96: 0.003943): the 98th
    with pytest.raises(ConfigError) as err:
        cosine(lr_decay=0.1).check_step_lr_floor(40, 1600, "client")
    assert err.value.field == "client.lr_decay"
    assert err.value.message.startswith("local step 98 of the 100 ") and "in round 35 of federation.rounds = 40" in err.value.message
    cosine(lr_decay=0.1).check_step_lr_floor(34, 1600, "client")  # last round t = 33


def test_merged_tail_row_is_no_step() -> None:
    # gamma 0.01 every step: 0.05 * 0.01^k below the floor first at k = 19, the 20th step; 1601 rows take 100 steps
    # (the trailing single row merged), 1602 take 101: same first step, a different count
    with pytest.raises(ConfigError, match=r"^client\.lr_gamma: local step 20 of the 100 .*largest client's 1601 rows"):
        step_schedule(lr_gamma=0.01).check_step_lr_floor(1, 1601, "client")
    with pytest.raises(ConfigError, match=r"^client\.lr_gamma: local step 20 of the 101 "):
        step_schedule(lr_gamma=0.01).check_step_lr_floor(1, 1602, "client")
    step_schedule(lr_gamma=0.01).check_step_lr_floor(1, 16 * 19, "client")  # 19 steps: k up to 18, 5e-38


@pytest.mark.parametrize("client", [
    ClientConfig(lr=0.05, lr_schedule="step", lr_gamma=1e-10, lr_schedule_over="rounds"),  # over rounds: check_lr_floor's
    ClientConfig(lr=0.05, lr_schedule="constant", lr_schedule_over="steps"),  # no schedule to run over the steps
])
def test_other_schedules_are_not_this_check(client: ClientConfig) -> None:
    client.check_step_lr_floor(1, 10**6, "client")


def test_run_ends_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 0.05, then 0.05 * 1e-300 = 5e-302: the second local step of round 1 is below the floor, whatever the split
    path = tmp_path / "b.toml"
    path.write_text('name = "b"\n[dataset]\nname = "digits"\n[partition]\nname = "iid"\n[model]\nname = "mlp"\n'
                    "[federation]\nnum_clients = 4\nclients_per_round = 4\nrounds = 3\n[client]\nlr = 0.05\n[algorithm]\nname = \"fedavg\"\n")
    args = ["client.lr_schedule=step", "client.lr_schedule_over=steps", "client.lr_gamma=1e-300"]
    assert main(["run", str(path), f"out_dir={tmp_path / 'out'}", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: client.lr_gamma: local step 2 of the "), err
    assert "in round 1 of federation.rounds = 3 would train at lr 0.05 * 1e-300^1 = 5e-302" in err[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

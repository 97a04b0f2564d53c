"""A client lr schedule whose lr falls below float32's smallest normal number in some round is refused at config time.

Why: ``client.lr_decay`` (or a step schedule's ``lr_gamma``) took the lr to 0 or a subnormal in a later round, and
q-FFL and SCAFFOLD then crashed with a traceback, VRL-SGD and FedCP went NaN blaming ``client.lr``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from chillfl.config import config_from_dict
from chillfl.errors import ConfigError

BASE = {"name": "b", "seed": 0, "dataset": {"name": "digits"}, "partition": {"name": "dirichlet", "alpha": 0.5}, "model": {"name": "mlp"},
        "federation": {"num_clients": 4, "clients_per_round": 4, "rounds": 3}, "client": {"lr": 0.05}, "algorithm": {"name": "fedavg"}}


def config(rounds: int = 3, **client: object) -> dict[str, object]:
    return {**BASE, "federation": {**BASE["federation"], "rounds": rounds}, "client": {"lr": 0.05, **client}}  # type: ignore[dict-item]


FLOOR = 2.0**-126
"""float32's smallest normal number, 1.1755e-38."""


def test_floor_is_float32_smallest_normal() -> None:
    import torch

    from chillfl.config import LR_FLOOR

    assert LR_FLOOR == torch.finfo(torch.float32).tiny


@pytest.mark.parametrize("args, field", [
    (["algorithm.name=qffl", "client.lr_decay=1e-300"], "client.lr_decay"),
    (["algorithm.name=scaffold", "client.lr_schedule=step", "client.lr_gamma=1e-300"], "client.lr_gamma"),
    (["algorithm.name=vrl_sgd", "client.lr_decay=1e-300"], "client.lr_decay"),
    (["algorithm.name=fedcp", "client.lr_decay=1e-300"], "client.lr_decay"),
    (["client.lr=1e-320"], "client.lr"),
])
def test_report_repros_end_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], field: str) -> None:
    path = tmp_path / "b.toml"
    path.write_text('name = "b"\n[dataset]\nname = "digits"\n[partition]\nname = "dirichlet"\nalpha = 0.5\n[model]\nname = "mlp"\n'
                    "[federation]\nnum_clients = 4\nclients_per_round = 4\nrounds = 3\n[client]\nlr = 0.05\n[algorithm]\nname = \"fedavg\"\n")
    assert main(["run", str(path), f"out_dir={tmp_path / 'out'}", "temperature.policy=none", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {field}: "), err
    assert "Traceback" not in err[0]
    if field != "client.lr":
        assert "round 2 of federation.rounds = 3" in err[0]  # round 1 trains at lr itself; round 2 at lr * 1e-300
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_first_round_below_is_named() -> None:
    # 0.05 * 0.1^t < 2^-126 (1.1755e-38) first at t = 37 (5e-39; t = 36 gives 5e-38): round 38
    with pytest.raises(ConfigError, match=r"^client\.lr_decay: round 38 of federation\.rounds = 400 .* 0\.05 \* 0\.1\^37 = 5e-39"):
        config_from_dict(config(400, lr_decay=0.1))
    # a step schedule: 0.05 * 0.01^(t // 10) below the floor first at t // 10 = 19 (5e-40; 18 gives 5e-38): round 191
    with pytest.raises(ConfigError, match=r"^client\.lr_gamma: round 191 of federation\.rounds = 400"):
        config_from_dict(config(400, lr_schedule="step", lr_gamma=0.01, lr_step_size=10))


def test_schedules_above_the_floor_are_accepted() -> None:
    config_from_dict(config(37, lr_decay=0.1))  # last round t = 36: 5e-38, above 1.1755e-38
    config_from_dict(config(1, lr_decay=1e-300))  # one round: it trains at lr itself
    config_from_dict(config(190, lr_schedule="step", lr_gamma=0.01, lr_step_size=10))  # last t = 189: 0.05 * 0.01^18 = 5e-38
    config_from_dict(config(3, lr=FLOOR))
    config_from_dict(config(1000, lr_schedule="cosine"))

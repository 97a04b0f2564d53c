"""q-FFL's L = 1/lr (``algorithm.lipschitz`` unset) reads the round's lr as every local step's: under a schedule over a
round's steps that lr is only their peak, so the estimate is refused in one line, as momentum and Adam are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import check_config

BASE: dict[str, Any] = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "algorithm.name": "qffl"}
PER_STEP = {"client.lr_schedule": "cosine", "client.lr_schedule_over": "steps"}


def _check(**over: Any) -> None:
    check_config(load_config(None, {**BASE, **over}))


def test_a_schedule_over_steps_is_refused_without_lipschitz() -> None:
    with pytest.raises(ConfigError) as err:
        _check(**PER_STEP)
    assert err.value.field == "client.lr_schedule_over" and "algorithm.lipschitz" in err.value.message


@pytest.mark.parametrize("over", [
    {**PER_STEP, "algorithm.lipschitz": 10.0},  # L fixed: the round's lr is not read
    {"client.lr_schedule": "cosine", "client.lr_schedule_over": "rounds"},  # one lr a round
    {"client.lr_schedule": "constant", "client.lr_schedule_over": "steps"},  # no schedule to run over the steps
])
def test_what_keeps_l_meaningful_is_accepted(over: dict[str, Any]) -> None:
    _check(**over)


def test_the_cli_says_it_in_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["run", "src/chillfl/experiments/demo.toml", "algorithm.name=qffl", "client.lr_schedule=step",
                 "client.lr_schedule_over=steps", f"out_dir={tmp_path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "client.lr_schedule_over" in err[0]
    assert not any(tmp_path.iterdir())

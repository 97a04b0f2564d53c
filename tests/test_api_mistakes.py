"""Mistakes made from Python that ended in a raw traceback from deep inside (a ValueError from ``dict()``, an
AttributeError on ``.items``, torch's ValueError on a lazy parameter) are one ConfigError naming the keyword."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest
import torch
from torch import nn

import chillfl
from chillfl.errors import ConfigError

CONFIG = {"federation": {"num_clients": 2, "rounds": 1}}


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(100, 8, generator=g), torch.randint(0, 3, (100,), generator=g)
    return chillfl.TensorData(x[:80], y[:80], x[80:], y[80:], num_classes=3)


def _compare(tune: Any) -> Callable[[], Any]:
    return lambda: chillfl.compare(model=nn.Linear(8, 3), data=_data(), config=CONFIG, grid={"client.lr": [0.1, 0.2]}, tune=tune,
                                   write=False, progress=False)


@pytest.mark.parametrize(("call", "field", "words"), [
    (_compare("client.lr=0.1,0.2"), "tune", "expected a dict {'section.option': [values]}, got str"),
    (_compare(["client.lr=0.1,0.2"]), "tune", "expected a dict {'section.option': [values]}, got list"),
    (lambda: chillfl.make_config(None, ["client.lr=0.1"]), "overrides", "expected a dict {'section.option': value}, got list"),  # type: ignore[arg-type]
    (lambda: chillfl.run(model=nn.Sequential(nn.Linear(8, 16), nn.LazyLinear(3)), data=_data(), config=CONFIG, write=False, progress=False),
     "model", "lazy parameters not yet shaped"),
], ids=["tune-string", "tune-list", "make-config-list", "lazy-model"])
def test_a_python_mistake_is_one_config_error(call: Callable[[], Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        call()
    assert err.value.field == field and words in err.value.message


def test_progress_lines_from_python_are_said(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``progress="lines"`` from Python printed nothing: its lines went to the log at INFO, which nothing had set up."""
    import logging

    monkeypatch.setattr(logging.getLogger("chillfl"), "level", logging.WARNING)  # as in a fresh interpreter: INFO goes nowhere
    chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, write=False, progress="lines")
    assert "round 1/1" in capsys.readouterr().err


def test_numpy_numbers_are_the_numbers_they_hold() -> None:
    """A notebook's loop over a NumPy array hands over ``np.int64`` / ``np.float32`` / arrays: each was refused
    ("seed: expected an integer, got np.int64(1)"), a message that contradicts itself."""
    import numpy as np

    config = chillfl.make_config(None, {"seed": np.int64(1), "federation.rounds": np.int64(2), "client.lr": np.float64(0.1)})
    assert (config.seed, config.federation.rounds, config.client.lr) == (1, 2, 0.1)
    assert type(config.seed) is int and type(config.client.lr) is float
    result = chillfl.compare(model=nn.Linear(8, 3), data=_data(), config=CONFIG, grid={"client.lr": np.array([0.1, 0.2])},
                             seeds=np.arange(2), write=False, progress=False)
    assert sorted(result.outputs) == ["client.lr=0.1, seed 0", "client.lr=0.1, seed 1", "client.lr=0.2, seed 0", "client.lr=0.2, seed 1"]


def test_a_python_run_stopped_before_its_checkpoint_is_started_again_from_python(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Its resume line said "start it again with `chillfl run .../config.toml`", which refuses a run on the user's own
    model ("model.name: 'custom' records a run on the user's own nn.Module")."""
    from chillfl.cli import main

    folder = tmp_path / "run.partial"
    folder.mkdir()
    (folder / "config.toml").write_text('name = "run"\n[model]\nname = "custom"\nclass = "x.M"\n[dataset]\nname = "digits"\n')
    assert main(["resume", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "it ran on your own model from Python: start it again with chillfl.run(...)" in err and "chillfl run " not in err


def test_a_large_float_in_a_run_name_does_not_read_as_its_reciprocal() -> None:
    """``client.lr = 1e6`` was named ``lr1e_06`` (the "+" of 1e+06 made "_"), beside 1e-6's ``lr1e-06``."""
    from chillfl.config import safe_name
    from chillfl.run_names import short_setting

    assert [safe_name(short_setting("client.lr", v)) for v in (1e6, 1e-6, 2.5e10)] == ["lr1e06", "lr1e-06", "lr2.5e10"]
    assert safe_name("client.lr=1e+06, seed 0") == "client.lr1e06_seed_0" and safe_name("FedAvg+FT") == "FedAvg_FT"


def test_a_value_given_twice_in_a_python_grid_names_the_keyword() -> None:
    """It was named ``--grid``, a flag of the command line the caller never used."""
    with pytest.raises(ConfigError) as err:
        chillfl.compare(model=nn.Linear(8, 3), data=_data(), config=CONFIG, grid={"client.lr": [0.1, 0.1]}, write=False, progress=False)
    assert err.value.field == "grid" and "duplicate values" in err.value.message

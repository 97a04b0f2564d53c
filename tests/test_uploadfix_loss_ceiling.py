"""The loss ceiling is in T = 1 units: a healthy run at a small legal temperature is not called exploding (``engine/health.py``)."""

from __future__ import annotations

import logging

import pytest

from chillfl.config import load_config
from chillfl.engine.health import LOSS_CEILING, LossWatch, loss_ceiling, loss_explosion, training_temperature
from chillfl.errors import Diverged
from chillfl.runner import run_experiment

from test_loss_explosion import TINY


def test_the_ceiling_scales_with_the_smallest_training_temperature():
    assert loss_ceiling(None) == loss_ceiling(1.0) == loss_ceiling(50.0) == LOSS_CEILING  # above T = 1 the loss only shrinks
    assert loss_ceiling(1e-4) == pytest.approx(1e7)
    assert training_temperature({"temperature_mean": 0.5, "temperatures": {"0": 0.9, "3": 1e-3}}) == 1e-3
    assert training_temperature({"temperature_mean": 1e-4}) == 1e-4
    assert training_temperature({"round": 1}) is None
    assert loss_explosion(3e3, None, 1e-4) is None  # CE(z / T) of an untrained model at T = 1e-4
    assert loss_explosion(2e7, None, 1e-4) == "is above 1e+07 (1000 / T at the round's smallest training temperature T = 0.0001)"
    assert loss_explosion(1000.5, None, 1.0) == "is above 1000"


def test_the_watch_reads_the_records_temperatures(caplog):
    strict = LossWatch(True)
    strict.observe({"round": 1, "train_loss": 1.5e3, "temperature_mean": 0.5, "temperatures": {"0": 1.0, "1": 1e-4}})  # no stop
    with pytest.raises(Diverged) as err:
        strict.observe({"round": 2, "train_loss": 1.5e3, "temperature_mean": 1.0})
    assert err.value.round == 2 and "is above 1000" in err.value.what


def test_a_healthy_run_at_t_1e_4_is_not_stopped_under_strict(caplog):
    config = load_config(None, {**TINY, "federation.rounds": 1, "temperature.policy": "fixed", "temperature.value": 1e-4,
                                "client.lr": 1e-6, "client.batch_size": 16, "strict": True})
    with caplog.at_level(logging.WARNING, logger="chillfl"):
        result = run_experiment(config, write=False, progress=False)
    assert result.records[0]["train_loss"] > LOSS_CEILING  # CE(z / T) of an untrained model: ~1e3 and up, and healthy
    assert not [r for r in caplog.records if "training loss" in r.getMessage()]

"""The temperature sweep trains as a run does: in the config's precision, whatever the caller's autocast (it trained in
bf16 inside one, its losses off)."""

from __future__ import annotations


import numpy as np
import torch

from chillfl.analysis.temperature_sweep import run_temperature_sweep
from chillfl.api import make_config


def test_a_callers_autocast_does_not_change_the_sweep() -> None:
    config = make_config(None, {"dataset": {"name": "digits"}, "model": {"name": "mlp"}, "federation": {"num_clients": 3, "rounds": 1}})
    plain = run_temperature_sweep(config, [0.5, 1.0], progress=False, write=False)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under = run_temperature_sweep(config, [0.5, 1.0], progress=False, write=False)
    assert np.array_equal(plain.loss, under.loss)

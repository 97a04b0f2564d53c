"""dp-fedavg on a batch-norm model, end to end: the run hands the model's variances to the mechanism, so the noised
global running_var stays at or above 0 and the model evaluates to finite numbers; and a global model that evaluates
to NaN is said (warned, or a stop under strict), where the run reported an accuracy from NaN logits with exit 0."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from chillfl.config import load_config
from chillfl.engine.health import LossWatch
from chillfl.errors import Diverged
from chillfl.runner import run_experiment

# the explorer's: noise_multiplier 1, clip 1 made features.1.running_var -0.0443 by round 5 (global_loss null, acc 0.1003)
CONFIG = {"name": "dpbn", "dataset.name": "digits", "partition.name": "dirichlet", "partition.alpha": 0.5, "model.name": "flexchill_cnn",
          "model.batch_norm": True, "federation.num_clients": 4, "federation.clients_per_round": 4, "federation.rounds": 5,
          "client.batch_size": 32, "client.lr": 0.1, "privacy.mechanism": "dp-fedavg", "privacy.noise_multiplier": 1.0, "privacy.clip_norm": 1.0}


def test_a_dp_fedavg_run_keeps_its_batch_norm_variances_valid(tmp_path: Path) -> None:
    out = run_experiment(load_config(None, {**CONFIG, "out_dir": str(tmp_path)}), progress=False)
    variances = {k: v for k, v in out.model_state.items() if k.endswith("running_var")}
    assert variances and all(bool((v >= 0).all()) for v in variances.values())
    assert all(r["global_loss"] is not None and math.isfinite(r["global_loss"]) for r in out.records)


def test_a_non_finite_global_loss_is_warned_once_or_stops_a_strict_run(caplog: pytest.LogCaptureFixture) -> None:
    watch = LossWatch(strict=False)
    with caplog.at_level(logging.WARNING):
        for r in (1, 2):
            watch.observe({"round": r, "train_loss": 1.0, "global_loss": float("nan")})
    assert caplog.text.count("the global model's test loss is nan") == 1
    with pytest.raises(Diverged, match="test loss is nan"):
        LossWatch(strict=True).observe({"round": 3, "train_loss": 1.0, "global_loss": float("nan")})
    LossWatch(strict=True).observe({"round": 3, "train_loss": 1.0, "global_loss": 2.3})  # finite: nothing

"""DP noise on a batch-norm running variance, and an evaluation of NaN logits (``privacy/aggregate.py``, ``training/local.py``).

``dp-fedavg`` noises every float entry of the global model, batch-norm statistics too: at noise_multiplier 1 and
clip_norm 1 a running_var near 0 went below it (min -0.044 on digits), every later evaluation's logits were NaN, and
metrics.jsonl said global_loss null but global_acc 0.1003: the argmax of NaN logits counted as predictions.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from chillfl.aggregation.base import ClientResult, FedAvg
from chillfl.config import load_config
from chillfl.experiment import build_data
from chillfl.models import build_model
from chillfl.models.common import variance_buffers
from chillfl.privacy.aggregate import PrivateAggregation
from chillfl.privacy.build import private_aggregator
from chillfl.training.local import evaluate


class TwoNorms(nn.Module):
    """A BatchNorm and an InstanceNorm that tracks statistics, under names that say nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 3)
        self.b = nn.BatchNorm1d(3)
        self.c = nn.Sequential(nn.InstanceNorm1d(3, track_running_stats=True), nn.BatchNorm1d(3, track_running_stats=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


def test_variance_buffers_are_found_by_the_norm_layers_not_by_name() -> None:
    assert variance_buffers(TwoNorms()) == {"b.running_var", "c.0.running_var"}  # the untracked BatchNorm keeps none
    assert variance_buffers(nn.BatchNorm2d(2)) == {"running_var"}
    assert variance_buffers(nn.Linear(2, 2)) == frozenset()


def _noised(nonnegative: frozenset[str]) -> dict[str, torch.Tensor]:
    model = build_model("flexchill_cnn", (1, 8, 8), 10, {"batch_norm": True}, seed=0)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    results = [ClientResult(c, {k: v.clone() for k, v in start.items()}, 10, 1, 0.1, 1.0, 0.0) for c in range(2)]
    private = PrivateAggregation(FedAvg(), client_noise=False, clip_norm=1.0, noise_multiplier=4.0, expected=2, seed=3, nonnegative=nonnegative)
    return private.aggregate(start, results, 0)


def test_dp_fedavg_keeps_the_noised_running_variances_at_or_above_0() -> None:
    keys = variance_buffers(build_model("flexchill_cnn", (1, 8, 8), 10, {"batch_norm": True}))
    assert len(keys) == 2
    raw = _noised(frozenset())
    assert min(float(raw[k].min()) for k in keys) < 0  # the noise (std 4 x 1 / 2 here) takes a variance of 1 below 0
    kept = _noised(frozenset(keys))
    assert all(float(kept[k].min()) >= 0 for k in keys)
    for k, v in raw.items():  # the clamp is all that changed: the same noise, the other entries as they were
        assert torch.equal(kept[k], v.clamp(min=0) if k in keys else v), k


DP_BN = {"dataset.name": "digits", "model.name": "flexchill_cnn", "model.batch_norm": True, "federation.num_clients": 2,
         "federation.clients_per_round": 2, "federation.rounds": 1, "privacy.mechanism": "dp-fedavg"}


def test_the_run_builder_hands_the_models_variances_to_each_mechanism() -> None:
    config = load_config(None, DP_BN)
    data = build_data(config)
    model = build_model("flexchill_cnn", data.dataset.input_shape, data.num_classes, {"batch_norm": True})
    for mechanism in ("dp-fedavg", "local"):
        built = private_aggregator(load_config(None, {**DP_BN, "privacy.mechanism": mechanism}), data, FedAvg(), model=model)
        assert isinstance(built, PrivateAggregation) and built.nonnegative == variance_buffers(model) != frozenset(), mechanism


def test_nan_logits_give_a_nan_accuracy_not_the_argmax_of_nan() -> None:
    model = nn.BatchNorm1d(4)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    x, y = torch.randn(6, 4), torch.zeros(6, dtype=torch.long)  # class 0: argmax of an all-NaN row, so counted right before
    state["running_var"] = torch.tensor([-1.0, 1.0, 1.0, 1.0])
    acc, loss = evaluate(model, state, x, y, batch_size=4)
    assert math.isnan(acc) and math.isnan(loss)
    state["running_var"] = torch.ones(4)
    acc, loss = evaluate(model, state, x, y, batch_size=4)
    assert 0.0 <= acc <= 1.0 and math.isfinite(loss)

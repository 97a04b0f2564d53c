"""Review of the day's merges (revD): what the RNG blocks, the epsilon caveat's hook and the base-loss flag check got wrong."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from chillfl.errors import ConfigError
from chillfl.training.local import check_base_loss, model_draws


class Net(nn.Module):
    """A user's class: it may draw in training (its forward is the user's code), not in eval mode."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_a_users_model_is_no_eval_block_unless_a_torch_layer_draws_there() -> None:
    """Every user class counted as drawing in eval mode: each evaluation took the global RNG lock, and the predictor's
    threads ran one behind another (DS-FL's soft labels: 0.7 s -> 1.2 s). Only fractional max-pooling draws there."""
    assert model_draws(Net()) and not model_draws(Net(), training=False)
    pooled = nn.Sequential(Net(), nn.Unflatten(1, (1, 2, 1)), nn.FractionalMaxPool2d(1, output_size=(1, 1)))
    assert model_draws(pooled, training=False)


def test_a_misspelt_flag_on_a_bound_methods_function_is_refused() -> None:
    """``getattr_static`` of a bound method does not see its function's attributes: a misspelt flag there was let through
    (while a flag spelt right was read through the method)."""

    class Obj:
        def loss(self, logits: torch.Tensor, y: torch.Tensor, temperature: float = 1.0, context: Any = None) -> torch.Tensor:
            return F.cross_entropy(logits, y)

        loss.use_context = True  # type: ignore[attr-defined]

    with pytest.raises(ConfigError, match="sets use_context, which the training step never reads; declare uses_context"):
        check_base_loss(Obj().loss, "client.loss")


def test_a_mechanisms_approximation_hook_must_return_text_checked_when_the_plan_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook was first called under the comparison's table, after every run: a list return was a TypeError traceback
    there and the folder stayed .partial. It is asked when the plan is made, and anything but a str or None refused."""
    from chillfl.config import load_config
    from chillfl.experiment import build_data
    from chillfl.privacy import build
    from chillfl.settings import privacy as settings

    spec = settings.mechanism_spec("dp-fedavg")
    bad = dataclasses.replace(spec, approximation=lambda options, config: ["each client's update"])  # type: ignore[arg-type, return-value]
    monkeypatch.setattr(build, "spec_of", lambda p: bad)
    config = load_config(None, {"dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "federation.rounds": 1,
                                "privacy.mechanism": "dp-fedavg", "privacy.delta": 1e-3})
    with pytest.raises(ConfigError) as refused:
        build.plan_privacy(config, build_data(config))
    assert refused.value.field == "privacy.mechanism" and "approximation hook must return a str" in refused.value.message


def test_mechanism_spec_keeps_its_fields_of_before_in_their_order() -> None:
    """``approximation`` came between ``check`` and ``adjacency``: a spec built positionally through ``adjacency`` put
    its adjacency into the hook. It comes last."""
    from chillfl.privacy.spec import MechanismSpec

    names = [f.name for f in dataclasses.fields(MechanismSpec)]
    before = ["name", "options", "accounts", "summary", "charges", "aggregator", "step", "rows", "settle", "check", "adjacency", "subsampled",
              "cost", "any_rule", "figures"]
    assert names[: len(before)] == before

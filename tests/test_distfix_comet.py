"""COMET at lambda = 0 is local training alone: no zero-weighted distillation phase (distbase finding 5)."""

from __future__ import annotations

import pytest

from test_distillation_protocol import run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_comet_at_zero_weight_trains_as_individual_with_weight_decay() -> None:
    # the distillation phase's steps at loss 0 * KL still applied client.weight_decay (and moved the model): round 2's
    # train_loss differed from Individual's. Without the phase each client's model sees the same private steps, seeds and
    # data as under Individual, so every client-side number is the same float.
    extra = {"client.weight_decay": 0.01, "federation.rounds": 2}
    comet = run("comet", reg_weight=0.0, **extra)
    alone = run("individual", **extra)
    assert [r["train_loss"] for r in comet] == [r["train_loss"] for r in alone]
    assert [r["local_acc"] for r in comet] == [r["local_acc"] for r in alone]
    assert all("distill_loss" not in r for r in comet)  # no phase ran, so no distillation loss

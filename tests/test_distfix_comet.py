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


def test_only_the_default_weighted_loss_is_skipped_at_weight_zero() -> None:
    """A method with its own distill_loss (a plugin's plain KL, FedMD's) distils whatever distill_weight is: at 0 the phase
    was skipped for it too, and a plugin that distilled before stopped without a word (rev112b 1)."""
    from chillfl.distillation.methods.fedmd import FedMD
    from chillfl.protocols.softlabels.method import SoftLabelMethod
    from chillfl.protocols.softlabels.server import _weighted_default_loss

    class OwnLoss(SoftLabelMethod):  # type: ignore[type-arg]
        distill_weight = 0.0

        def distill_loss(self):  # type: ignore[no-untyped-def]
            return super().distill_loss()

    class Default(SoftLabelMethod):  # type: ignore[type-arg]
        distill_weight = 0.0

    assert not _weighted_default_loss(OwnLoss.__new__(OwnLoss)) and not _weighted_default_loss(FedMD.__new__(FedMD))
    assert _weighted_default_loss(Default.__new__(Default))

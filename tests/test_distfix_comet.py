"""COMET at lambda = 0 is local training alone: no zero-weighted distillation phase (distbase finding 5)."""

from __future__ import annotations

import pytest

from pathlib import Path

import torch
from plugin_modules import plugin_module
from test_distillation_protocol import run
from test_qa_plugins import BASE

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


OWN_LOSS = '''
from dataclasses import dataclass

from chillfl.extend import SoftLabelMethod, SoftLabelSpec
from chillfl.protocols.softlabels.labels import weighted_kl


@dataclass(frozen=True)
class NoOptions:
    pass


class OwnKL(SoftLabelMethod[NoOptions]):
    distill_weight = 0.0  # read by nothing: its own loss is a plain KL

    def distill_loss(self):
        return weighted_kl(1.0)


SPEC = SoftLabelSpec("own_kl", NoOptions, OwnKL)
'''


def test_a_method_with_its_own_loss_distils_at_weight_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run itself (not only the predicate above): a plugin whose own distill_loss ignores distill_weight = 0 still runs
    the clients' distillation phase from round 2 on, as before the zero-weight skip (testreview112 1)."""
    from chillfl.config import load_config
    from chillfl.runner import run_experiment

    with plugin_module(tmp_path, monkeypatch, "own_kl_plugin", OWN_LOSS):
        config = load_config(None, {**BASE, "distillation": {"method": "own_kl_plugin:SPEC", "public_size": 200, "subset_size": 100},
                                    "federation": {"num_clients": 4, "clients_per_round": 2, "rounds": 2}})
        records = run_experiment(config, write=False, progress=False).records
    assert records[1].get("distill_loss") is not None


def test_soft_label_entropy_of_narrow_float_rows_follows_their_dtype() -> None:
    """A bf16 row of thirds sums to 1.001953125, past 1e-3 but within bf16's own rounding: a number, as the privacy check
    accepts it; an all-zero bf16 row of 128 classes is no distribution (testreview112 2)."""
    from chillfl.protocols.softlabels.server import mean_entropy

    thirds = torch.full((1, 3), 1 / 3).to(torch.bfloat16)
    assert float(thirds.double().sum()) == 1.001953125
    assert mean_entropy(thirds) is not None
    assert mean_entropy(torch.zeros(1, 128, dtype=torch.bfloat16)) is None

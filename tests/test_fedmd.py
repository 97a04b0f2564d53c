"""FedMD (Li & Wang, 2019): consensus, the transfer-learning phase, end to end under every executor."""

from __future__ import annotations

import pytest
import torch

from chillfl.config import load_config
from chillfl.protocols.softlabels import SoftLabelUplink
from chillfl.distillation.fedmd import consensus
from chillfl.distillation.methods.fedmd import FedMD, FedMDOptions
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment, build_protocol
from chillfl.settings.distillation import parse_distillation

from float_paths import FEDMD_REL
from kd_helpers import MIXED, check_every_executor, records

FEDMD = {"method": "fedmd", "public_size": 200, "subset_size": 100, "transfer_epochs": 2, "server_epochs": 1, "distill_batch_size": 32}


def test_consensus_is_the_plain_mean_by_hand():
    # two clients, two public samples: [[0.2,0.8],[0.6,0.4]] and [[0.4,0.6],[1.0,0.0]] -> [[0.3,0.7],[0.8,0.2]]
    a = torch.tensor([[0.2, 0.8], [0.6, 0.4]])
    b = torch.tensor([[0.4, 0.6], [1.0, 0.0]])
    assert torch.allclose(consensus([a, b]), torch.tensor([[0.3, 0.7], [0.8, 0.2]]))
    # three clients, one sample: ([1,0] + [0,1] + [0.5,0.5]) / 3 = [0.5, 0.5]
    assert torch.allclose(consensus([torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.5]])]), torch.tensor([[0.5, 0.5]]))


def test_fedmd_method_aggregates_to_the_consensus_without_sharpening():
    method = FedMD(FedMDOptions(), 2, 0, "int32", 10)
    idx = torch.tensor([3, 7])
    ups = [SoftLabelUplink(0, 1, idx, torch.tensor([[0.2, 0.8], [0.6, 0.4]])), SoftLabelUplink(1, 1, idx, torch.tensor([[0.4, 0.6], [1.0, 0.0]]))]
    agg = method.aggregate(1, idx, ups)
    assert agg.keep.tolist() == [True, True]
    assert torch.allclose(agg.rows, torch.tensor([[0.3, 0.7], [0.8, 0.2]])) and torch.equal(agg.rows, agg.server_rows)


def test_options_and_defaults():
    setup = parse_distillation({"method": "fedmd", "public_size": 10, "subset_size": 5})
    assert setup.options.transfer_epochs == 20 and setup.options.transfer_lr is None and setup.options.scores == "logits" and setup.cache_duration == 0
    with pytest.raises(ConfigError) as err:
        parse_distillation({"method": "fedmd", "public_size": 10, "subset_size": 5, "transfer_epochs": -1})
    assert err.value.field == "distillation.transfer_epochs"


def test_transfer_learning_trains_every_model_on_the_labelled_public_set():
    cfg = load_config(None, {"dataset.name": "digits", "federation.num_clients": 4, "federation.clients_per_round": 2, "model.name": "mlp", "client.lr": 0.1})
    exp = build_experiment(cfg.with_overrides({"distillation": {**FEDMD, "transfer_epochs": 10}}))
    protocol = build_protocol(exp)
    transfer = protocol.client.pretraining
    assert transfer is not None and transfer.specs[0].epochs == 10 and transfer.lr == 0.1
    # the labels are the public rows' own training labels
    assert torch.equal(transfer.y, exp.data.dataset.y_train[torch.from_numpy(exp.data.public_indices)])
    # the server model already did it: it differs from the initial state, and beats chance on the test set
    assert any(not torch.equal(protocol.server_state[k], exp.initial_state[k]) for k in exp.initial_state)
    assert protocol.evaluation.metrics(protocol.server_state)["global_acc"] > 0.3
    none = build_protocol(build_experiment(cfg.with_overrides({"distillation": {**FEDMD, "transfer_epochs": 0}})))
    assert none.client.pretraining is None


def test_fedmd_every_executor():
    recs = check_every_executor({"model": {"name": "mlp"}, "distillation": FEDMD}, FEDMD_REL)
    assert recs[-1]["global_acc"] is not None and recs[-1]["distill_loss"] is not None


def test_fedmd_every_executor_heterogeneous_models():
    recs = check_every_executor({"model": MIXED, "distillation": FEDMD}, FEDMD_REL)
    assert recs[-1]["local_acc"] is not None


def test_transfer_phase_changes_the_first_round():
    over = {"model": {"name": "mlp"}, "federation.rounds": 1}
    with_transfer = records({**over, "distillation": FEDMD})
    without = records({**over, "distillation": {**FEDMD, "transfer_epochs": 0}})
    assert with_transfer[0]["train_loss"] < without[0]["train_loss"]  # pre-trained models start lower on their private data


def test_digest_loss_on_logits_is_the_mean_absolute_error_by_hand():
    from chillfl.distillation.fedmd import mean_absolute_error

    # |[1,-2] - [0,0]| = [1,2], |[3,0] - [1,1]| = [2,1] -> (1 + 2 + 2 + 1) / 4 = 1.5
    assert mean_absolute_error(torch.tensor([[1.0, -2.0], [3.0, 0.0]]), torch.tensor([[0.0, 0.0], [1.0, 1.0]])).item() == pytest.approx(1.5)


@pytest.mark.parametrize("scores", ["logits", "probs"])
def test_class_scores_are_logits_by_default_or_probabilities(scores, monkeypatch):
    from chillfl.distillation.methods import fedmd as methods

    seen: list[torch.Tensor] = []
    original = methods.FedMD.aggregate

    def spy(self, round, indices, uplinks):
        seen.extend(u.soft_labels for u in uplinks)
        return original(self, round, indices, uplinks)

    monkeypatch.setattr(methods.FedMD, "aggregate", spy)
    over = {"model": {"name": "mlp"}, "federation.rounds": 1, "distillation": {**FEDMD, "transfer_epochs": 0, **({} if scores == "logits" else {"scores": "probs"})}}
    records(over)
    rows = torch.cat(seen)
    sums_to_one = torch.allclose(rows.sum(1), torch.ones(len(rows)), atol=1e-5)
    assert sums_to_one == (scores == "probs") and bool((rows < 0).any()) == (scores == "logits")

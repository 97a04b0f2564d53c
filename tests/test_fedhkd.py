"""FedHKD (Chen et al., ICLR 2023): hyper-knowledge averaging, its KD term, the noise, end to end."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.prototypes.maths import aggregate_means, class_means
from chillfl.prototypes.methods.fedhkd import HyperKnowledgeLoss, hyper_knowledge_kd
from chillfl.settings.prototypes import parse_prototypes

from kd_helpers import MIXED, check_every_executor, records


def test_hyper_knowledge_averaging_by_hand():
    # class 0: client A holds 1 sample, representation mean [1,1], soft prediction [0.8,0.2];
    #          client B holds 3,          mean [4,4],              soft [0.4,0.6]
    # H_0 = (1*[1,1] + 3*[4,4]) / 4 = [13/4, 13/4];  Q_0 = (1*[0.8,0.2] + 3*[0.4,0.6]) / 4 = [2.0/4, 2.0/4] = [0.5, 0.5]
    # class 1: only B, 2 samples, mean [2,0], soft [0.1,0.9] -> copied
    ha, hb = torch.tensor([[1.0, 1.0], [0.0, 0.0]]), torch.tensor([[4.0, 4.0], [2.0, 0.0]])
    qa, qb = torch.tensor([[0.8, 0.2], [0.0, 0.0]]), torch.tensor([[0.4, 0.6], [0.1, 0.9]])
    na, nb = torch.tensor([1, 0]), torch.tensor([3, 2])
    h, mask = aggregate_means([ha, hb], [na, nb])
    q, _ = aggregate_means([qa, qb], [na, nb])
    assert torch.allclose(h, torch.tensor([[3.25, 3.25], [2.0, 0.0]]))
    assert torch.allclose(q, torch.tensor([[0.5, 0.5], [0.1, 0.9]]))
    assert mask.tolist() == [True, True]


def test_soft_predictions_per_class_are_means_of_softmax_at_tau():
    # logits [0, ln 3 * tau] at tau = 0.5 -> softmax([0, ln 3]) = [1/4, 3/4] for both class-0 samples
    tau = 0.5
    logits = torch.tensor([[0.0, math.log(3) * tau], [0.0, math.log(3) * tau]])
    soft, counts = class_means(torch.softmax(logits / tau, dim=-1), torch.tensor([0, 0]), 2)
    assert torch.allclose(soft[0], torch.tensor([0.25, 0.75])) and counts.tolist() == [2, 0]


def test_kd_term_by_hand():
    # head = identity, no bias, tau = 0.5.
    # class 0: H_0 = [0,0] -> q = [1/2,1/2]; Q_0 = [1,0] -> KL = 1 * ln(1 / 0.5) = ln 2
    # class 1: H_1 = [0, 0.5 ln 3] -> logits / tau = [0, ln 3] -> q = [1/4, 3/4]; Q_1 = [1/2,1/2]
    #          KL = 0.5 ln(0.5/0.25) + 0.5 ln(0.5/0.75) = 0.5 ln(4/3)
    # mean over known classes: (ln 2 + 0.5 ln(4/3)) / 2; only class 0 known: ln 2
    w = torch.eye(2)
    h = torch.tensor([[0.0, 0.0], [0.0, 0.5 * math.log(3)]])
    q = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    both = hyper_knowledge_kd(w, None, h, q, torch.tensor([True, True]), 0.5)
    assert both.item() == pytest.approx((math.log(2) + 0.5 * math.log(4 / 3)) / 2, rel=1e-6)
    assert hyper_knowledge_kd(w, None, h, q, torch.tensor([True, False]), 0.5).item() == pytest.approx(math.log(2), rel=1e-6)
    # a bias shifts the logits: bias [0, 0.5 ln 3] turns class 0's q into [1/4, 3/4] too -> KL([1,0] || ...) = ln 4
    bias = torch.tensor([0.0, 0.5 * math.log(3)])
    assert hyper_knowledge_kd(w, bias, h, q, torch.tensor([True, False]), 0.5).item() == pytest.approx(math.log(4), rel=1e-6)


def test_kd_reduction_mean_is_the_official_kldivloss_default():
    # the official nn.KLDivLoss() (reduction "mean") averages over known classes *and* the C = 2 entries:
    # (ln 2 + 0.5 ln(4/3)) / (2 * 2) with both classes known, ln 2 / 2 with class 0 only; "batchmean" is 2x that
    w = torch.eye(2)
    h = torch.tensor([[0.0, 0.0], [0.0, 0.5 * math.log(3)]])
    q = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    both = hyper_knowledge_kd(w, None, h, q, torch.tensor([True, True]), 0.5, "mean")
    assert both.item() == pytest.approx((math.log(2) + 0.5 * math.log(4 / 3)) / 4, rel=1e-6)
    assert hyper_knowledge_kd(w, None, h, q, torch.tensor([True, False]), 0.5, "mean").item() == pytest.approx(math.log(2) / 2, rel=1e-6)
    assert parse_prototypes({"method": "fedhkd", "kd_reduction": "mean"}).options.kd_reduction == "mean"
    assert parse_prototypes({"method": "fedhkd"}).options.kd_reduction == "batchmean"


def test_fedhkd_loss_is_ce_plus_lam_kd_plus_gamma_distance():
    # logits 0 -> CE = ln 2; distance term: features [1,0] vs prototype [0,0] for the one class-0 sample: 1 / 2 = 0.5
    # KD term with identity head as in test_kd_term_by_hand (class 0 only): ln 2
    loss = HyperKnowledgeLoss(distance_weight=0.05, kd_weight=0.1, kd_temperature=0.5, head_weight="w", head_bias=None)
    ctx = {"protos": torch.tensor([[0.0, 0.0], [0.0, 0.5 * math.log(3)]]), "proto_mask": torch.tensor([True, False]), "soft": torch.tensor([[1.0, 0.0], [0.5, 0.5]])}
    value = loss(torch.zeros(1, 2), torch.tensor([0]), 1.0, features=torch.tensor([[1.0, 0.0]]), params={"w": torch.eye(2)}, context=ctx)
    assert value.item() == pytest.approx(math.log(2) + 0.05 * 0.5 + 0.1 * math.log(2), rel=1e-6)


def test_defaults_as_the_official_code():
    o = parse_prototypes({"method": "fedhkd"})
    assert (o.options.lam, o.options.kd_weight, o.options.temperature, o.options.noise_std, o.options.share_model) == (0.05, 0.05, 0.5, 2.0, True)
    assert o.share_model


def test_fedhkd_every_executor_shares_models_and_noise_is_seeded():
    recs = check_every_executor({"model": {"name": "mlp"}, "prototypes": {"method": "fedhkd"}})
    last = recs[-1]
    assert last["global_acc"] is not None and last["local_proto_acc"] is not None
    # the model travels too: at least the MLP's 64*64 + 64 + 64*10 + 10 (digits: 64 inputs) floats per client each way
    assert last["bytes_up"] >= 3 * 4 * (64 * 64 + 64 + 64 * 10 + 10)


def test_noise_changes_the_run():
    over = {"model": {"name": "mlp"}, "federation.rounds": 2}
    noisy = records({**over, "prototypes": {"method": "fedhkd"}})
    exact = records({**over, "prototypes": {"method": "fedhkd", "noise_std": 0.0}})
    assert noisy[-1]["train_loss"] != exact[-1]["train_loss"]
    assert noisy[0]["train_loss"] == exact[0]["train_loss"]  # round 1 trains with no global knowledge: CE only


def test_fedhkd_heterogeneous_models_without_model_sharing():
    recs = check_every_executor({"model": MIXED, "prototypes": {"method": "fedhkd", "share_model": False}})
    assert recs[-1]["global_acc"] is not None


def test_fedhkd_sharing_models_refuses_heterogeneous_clients():
    cfg = load_config(None, {"dataset.name": "digits", "federation.num_clients": 6, "federation.clients_per_round": 2})
    cfg = cfg.with_overrides({"prototypes": {"method": "fedhkd"}, "model": MIXED})
    with pytest.raises(ConfigError) as err:
        build_experiment(cfg)
    assert err.value.field == "model.groups" and "share_model" in err.value.message


def test_a_frozen_head_is_read_by_the_kd_term_and_stays_put():
    # Linear(2, 2) -> Linear(2, 2), the head ("1") frozen (LocalSpec.frozen): the step moved it into the buffers and the
    # loss's params lost it (before the fix: KeyError '1.weight' in the first step). One step: the mean loss is the
    # loss at the start, with the head read from the frozen weights; the head stays, the body moves.
    from chillfl.training.local import LocalSpec, train_client

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    loss = HyperKnowledgeLoss(distance_weight=0.05, kd_weight=0.1, kd_temperature=0.5, head_weight="1.weight", head_bias="1.bias")
    ctx = {"protos": torch.tensor([[0.0, 0.0], [0.0, 0.5 * math.log(3)]]), "proto_mask": torch.tensor([True, False]), "soft": torch.tensor([[1.0, 0.0], [0.5, 0.5]])}
    x, y = torch.tensor([[1.0, -1.0], [0.5, 2.0]]), torch.tensor([0, 1])
    spec = LocalSpec(epochs=1, batch_size=2, base_loss=loss, frozen=frozenset({"1.weight", "1.bias"}))
    out = train_client(model, start, x, y, spec=spec, lr=0.1, temperature=1.0, context=ctx, generator=torch.Generator().manual_seed(0))
    feats = model[0](x)
    want = loss(model(x), y, 1.0, features=feats, params=start, context=ctx)
    assert out.num_steps == 1 and out.mean_loss == pytest.approx(want.item(), rel=1e-5)
    assert torch.equal(out.params["1.weight"], start["1.weight"]) and torch.equal(out.params["1.bias"], start["1.bias"])
    assert not torch.equal(out.params["0.weight"], start["0.weight"])

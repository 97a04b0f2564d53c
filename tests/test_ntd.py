"""FedNTD's not-true distillation term ``ntd`` (:mod:`chillfl.training.term_kinds.ntd`): the loss by hand, its gradient,
the teacher forward, the term from ``[objective] terms`` under every executor, and its option errors."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.term_kinds.ntd import NtdTerm, ntd_loss, teacher_logits
from chillfl.training.terms import StepView, registered_terms, term_names

from float_paths import assert_records_close
from methods_e2e import config, records

LN2, LN3 = math.log(2.0), math.log(3.0)

# Two samples, three classes, tau = 1.
# Sample 0, y = 0: the not-true classes are 1, 2.
#   global z_g = [-2, ln 3, 0] -> q~_g = [e^ln3, e^0] / (3 + 1) = [3/4, 1/4]
#   local  z_l = [ 7,  0,   0] -> q~_l = [1/2, 1/2]   (the true logit 7 takes no part)
#   KL = 3/4 ln((3/4)/(1/2)) + 1/4 ln((1/4)/(1/2)) = 3/4 (ln 3 - ln 2) - 1/4 ln 2 = 3/4 ln 3 - ln 2 = 0.130812...
# Sample 1, y = 2: the not-true classes are 0, 1.
#   global z_g = [ln 2,     0, -3 ] -> q~_g = [2/3, 1/3]
#   local  z_l = [ln 2 + 5, 5, 100] -> q~_l = [2/3, 1/3]  (the same up to the shift 5; the true logit differs wildly)
#   KL = 0
# L_NTD = tau^2 * mean = (3/4 ln 3 - ln 2 + 0) / 2
Y = torch.tensor([0, 2])
Z_G = torch.tensor([[-2.0, LN3, 0.0], [LN2, 0.0, -3.0]])
Z_L = torch.tensor([[7.0, 0.0, 0.0], [LN2 + 5.0, 5.0, 100.0]])
BY_HAND = (0.75 * LN3 - LN2) / 2


def test_ntd_loss_by_hand_excludes_the_true_class() -> None:
    assert ntd_loss(Z_L, Z_G, Y, 1.0).item() == pytest.approx(BY_HAND, rel=1e-6)
    assert BY_HAND == pytest.approx(0.0654059, rel=1e-5)
    # the second sample alone: equal up to a constant shift, and its true logits differ -> exactly the not-true KL 0
    assert ntd_loss(Z_L[1:], Z_G[1:], Y[1:], 1.0).item() == pytest.approx(0.0, abs=1e-6)
    # the true class is excluded: changing the true logits changes nothing; the same logits with a full softmax would
    changed = Z_L.clone()
    changed[0, 0], changed[1, 2] = -50.0, 3.0
    assert ntd_loss(changed, Z_G, Y, 1.0).item() == pytest.approx(BY_HAND, rel=1e-6)
    assert ntd_loss(Z_L, Z_G, torch.tensor([1, 2]), 1.0).item() != pytest.approx(BY_HAND, rel=1e-3)  # another label, other classes


def test_ntd_loss_is_zero_for_equal_and_shifted_logits() -> None:
    z = torch.randn(5, 4)
    y = torch.tensor([0, 1, 2, 3, 1])
    assert ntd_loss(z, z, y, 1.0).item() == 0.0
    assert ntd_loss(z + 3.0, z, y, 2.0).item() == pytest.approx(0.0, abs=1e-6)
    assert ntd_loss(z * 2.0, z, y, 1.0).item() > 1e-3  # a scale is not a shift


def test_tau_scales_the_softmaxes_and_tau_squared_the_kl() -> None:
    # doubling every logit with tau = 2 gives the same q~'s: KL as by hand, times tau^2 = 4 unless tau_squared is off
    assert ntd_loss(2 * Z_L, 2 * Z_G, Y, 2.0).item() == pytest.approx(4 * BY_HAND, rel=1e-6)
    assert ntd_loss(2 * Z_L, 2 * Z_G, Y, 2.0, tau_squared=False).item() == pytest.approx(BY_HAND, rel=1e-6)
    assert ntd_loss(2 * Z_L, 2 * Z_G, Y, torch.tensor(2.0)).item() == pytest.approx(4 * BY_HAND, rel=1e-6)  # tau as a 0-d tensor (vmap)


def test_gradient_is_zero_on_the_true_class_and_by_hand_elsewhere() -> None:
    z = Z_L.clone().requires_grad_(True)
    ntd_loss(z, Z_G, Y, 1.0).backward()
    assert z.grad is not None
    assert z.grad[0, 0].item() == 0.0 and z.grad[1, 2].item() == 0.0  # exactly: the true class is excluded
    # elsewhere d/dz_l[c] = tau^2 * (q~_l(c) - q~_g(c)) / tau / batch: sample 0 (1/2 - 3/4) / 2 = -1/8 and +1/8, sample 1: 0
    torch.testing.assert_close(z.grad, torch.tensor([[0.0, -0.125, 0.125], [0.0, 0.0, 0.0]]), atol=1e-6, rtol=0)
    g = Z_G.clone().requires_grad_(True)  # the teacher is a target
    zl = Z_L.clone().requires_grad_(True)
    ntd_loss(zl, g, Y, 1.0).backward()
    assert g.grad is None


def test_teacher_runs_the_anchor_in_eval_mode_with_its_buffers_and_updates_nothing() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5), nn.Linear(4, 3))
    model.train()
    anchor = {k: v.detach().clone() + 0.1 for k, v in model.state_dict().items() if k != "1.num_batches_tracked"}
    anchor["1.num_batches_tracked"] = torch.tensor(0)
    anchor["1.running_var"] = torch.full((4,), 2.0)
    x = torch.randn(6, 3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    step = StepView(model, x, torch.zeros(6, dtype=torch.long), torch.zeros(6, 4), torch.zeros(6, 3), torch.zeros(()), dict(model.named_buffers()))
    got = teacher_logits(step, anchor)
    reference = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Dropout(0.5), nn.Linear(4, 3))
    reference.load_state_dict(anchor)
    reference.eval()
    torch.testing.assert_close(got, reference(x).detach())
    assert model.training  # the template's mode is restored
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # no running statistic moved


def test_the_term_reads_beta_tau_and_the_start_model() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 3)
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
    logits = torch.func.functional_call(model, params, (x,))
    step = StepView(model, x, y, x, logits, torch.zeros(()), {})
    anchor = {k: v.detach() + 0.3 * torch.randn_like(v) for k, v in params.items()}
    term = NtdTerm()
    value = term(params, {"ntd_beta": 0.5, "ntd_tau": 2.0, "global_params": anchor}, step)
    expected = 0.5 * ntd_loss(logits, torch.func.functional_call(model, anchor, (x,)), y, 2.0)
    assert value.item() == pytest.approx(expected.item(), rel=1e-6) and value.item() > 0
    same = term(params, {"ntd_beta": 0.5, "ntd_tau": 2.0, "global_params": {k: v.detach() for k, v in params.items()}}, step)
    assert same.item() == pytest.approx(0.0, abs=1e-7)  # at the round's start the student is the teacher


NTD_RUN: dict[str, Any] = {"model": {"name": "mlp", "hidden": [16]}, "federation.rounds": 2}


def test_ntd_is_registered_and_listed() -> None:
    assert "ntd" in registered_terms() and "ntd" in term_names()
    exp = build_experiment(config(**NTD_RUN, **{"objective.terms": [{"name": "ntd", "beta": 0.5, "tau": 2.0}]}))
    assert [type(t).__name__ for t in exp.spec.terms].count("NtdTerm") == 1


def test_fedavg_plus_ntd_end_to_end_under_every_executor() -> None:
    base = config(**NTD_RUN)
    cfg = base.with_overrides({"objective": {"terms": [{"name": "ntd"}]}})
    seq = records(cfg)
    assert len(seq) == 2 and all(math.isfinite(r["train_loss"]) for r in seq)
    plain = records(base)
    assert seq[0]["train_loss"] != plain[0]["train_loss"]  # the term is on from the first step of round 0
    assert seq[-1]["train_loss"] != plain[-1]["train_loss"]
    assert records(cfg.with_overrides({"executor": "processes", "threads": 1})) == seq  # one float path: bitwise
    vec = records(cfg.with_overrides({"executor": "vectorized"}))  # really vmapped: tests/conftest.py makes a fallback an error
    assert_records_close(seq, vec)


def test_ntd_composes_with_the_proximal_term_on_the_same_start_model() -> None:
    cfg = config(**NTD_RUN, **{"objective.terms": ["ntd", {"name": "proximal", "mu": 0.1}]})
    exp = build_experiment(cfg)
    assert sorted(type(t).__name__ for t in exp.spec.terms) == ["NtdTerm", "ProximalTerm"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"beta": -0.1}, "objective.terms[0].beta"),
        ({"tau": 0.0}, "objective.terms[0].tau"),
        ({"tau": -1.0}, "objective.terms[0].tau"),
        ({"temperature": 1.0}, "objective.terms[0]"),  # an unknown option
    ],
)
def test_option_errors_name_the_objective_terms_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(config(**NTD_RUN, **{"objective.terms": [{"name": "ntd", **options}]}))
    assert info.value.field.startswith(field)

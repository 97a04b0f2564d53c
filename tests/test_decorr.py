"""FedDecorr's decorrelation term ``decorr`` (:mod:`chillfl.training.term_kinds.decorr`): the loss by hand, its edge cases and
gradient, the term from ``[objective] terms`` under every executor, and its option errors."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn

from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from chillfl.training.term_kinds.decorr import DecorrTerm, decorrelation_loss
from chillfl.training.terms import StepView, registered_terms, term_names

from float_paths import assert_records_close
from methods_e2e import config, records

# N = 3 samples, d = 2 dimensions.
#   column 0 = [1, 2, 3]: mean 2, centred [-1, 0, 1], var (Bessel) = (1 + 0 + 1) / 2 = 1    -> z0 = [-1, 0, 1]
#   column 1 = [0, 1, 5]: mean 2, centred [-2, -1, 3], var = (4 + 1 + 9) / 2 = 7           -> z1 = [-2, -1, 3] / sqrt(7)
#   (Z^T Z)_01 = (2 + 0 + 3) / sqrt(7) = 5 / sqrt(7), squared 25 / 7; both off-diagonal entries are that, so their mean is 25 / 7
#   L = (25 / 7) / N = 25 / 21                                                             (eps = 1e-8 moves the 9th digit)
FEATURES = torch.tensor([[1.0, 0.0], [2.0, 1.0], [3.0, 5.0]])
BY_HAND = 25 / 21


def test_decorrelation_loss_by_hand() -> None:
    assert decorrelation_loss(FEATURES).item() == pytest.approx(BY_HAND, rel=1e-6)
    assert BY_HAND == pytest.approx(1.1904762, rel=1e-6)
    # z-scored: a shift and a positive scale of a column change nothing
    moved = FEATURES * torch.tensor([10.0, 0.5]) + torch.tensor([-3.0, 7.0])
    assert decorrelation_loss(moved).item() == pytest.approx(BY_HAND, rel=1e-5)


def test_uncorrelated_columns_give_zero_and_the_diagonal_takes_no_part() -> None:
    # centred columns [-1, 0, 1] and [1, -2, 1] have dot product -1 + 0 + 1 = 0: nothing off the diagonal
    assert decorrelation_loss(torch.tensor([[-1.0, 1.0], [0.0, -2.0], [1.0, 1.0]])).item() == pytest.approx(0.0, abs=1e-7)
    # identical columns: every z-scored column is z0, (Z^T Z)_ij = |z0|^2 = N - 1 = 2 for all i != j; L = 2^2 / 3 = 4 / 3 for any d
    same = torch.tensor([[1.0], [2.0], [3.0]]).repeat(1, 4)
    assert decorrelation_loss(same).item() == pytest.approx(4 / 3, rel=1e-6)


def test_one_sample_or_one_dimension_adds_zero_and_keeps_the_graph() -> None:
    one = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    value = decorrelation_loss(one)
    assert value.item() == 0.0 and value.requires_grad
    assert decorrelation_loss(torch.tensor([[1.0], [4.0], [2.0]])).item() == 0.0
    # a constant column (no variance): eps keeps it finite, and it correlates with nothing
    constant = torch.tensor([[1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
    assert decorrelation_loss(constant).item() == pytest.approx(0.0, abs=1e-7)


def test_gradient_by_hand_and_a_step_lowers_the_correlation() -> None:
    # L(Z) for d = 2 is (1/N) c^2 with c = (Z^T Z)_01 = z0 . z1; at z0 orthogonal to z1 (c = 0) the gradient is 0
    x = torch.tensor([[-1.0, 1.0], [0.0, -2.0], [1.0, 1.0]], requires_grad=True)
    decorrelation_loss(x).backward()
    assert x.grad is not None and float(x.grad.abs().max()) < 1e-6
    z = FEATURES.clone().requires_grad_(True)
    decorrelation_loss(z).backward()
    assert z.grad is not None
    lower = decorrelation_loss((FEATURES - 0.05 * z.grad).detach()).item()
    assert lower < BY_HAND


def test_the_term_reads_beta_and_the_steps_features() -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 3)
    x, y = torch.randn(4, 3), torch.tensor([0, 1, 2, 0])
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
    logits = torch.func.functional_call(model, params, (x,))
    step = StepView(model, x, y, FEATURES, logits, torch.zeros(()), {})
    assert DecorrTerm()(params, {"decorr_beta": 0.5}, step).item() == pytest.approx(0.5 * BY_HAND, rel=1e-6)
    assert DecorrTerm().reads == ("decorr_beta",) and DecorrTerm.per_batch


RUN: dict[str, Any] = {"model": {"name": "mlp", "hidden": [16]}, "federation.rounds": 2}


def test_decorr_is_registered_listed_and_built_from_the_config() -> None:
    assert "decorr" in registered_terms() and "decorr" in term_names()
    exp = build_experiment(config(**RUN, **{"objective.terms": [{"name": "decorr", "beta": 0.3}]}))
    assert [type(t).__name__ for t in exp.spec.terms] == ["DecorrTerm"]


def test_fedavg_plus_decorr_end_to_end_under_every_executor() -> None:
    base = config(**RUN)
    cfg = base.with_overrides({"objective": {"terms": [{"name": "decorr", "beta": 1.0}]}})
    seq = records(cfg)
    assert len(seq) == 2 and all(math.isfinite(r["train_loss"]) for r in seq)
    plain = records(base)
    assert seq[0]["train_loss"] != plain[0]["train_loss"]  # on from the first step
    zero = records(cfg.with_overrides({"objective": {"terms": [{"name": "decorr", "beta": 0.0}]}}))
    sent = ("bytes_down", "bytes_cumulative")
    assert [{k: v for k, v in r.items() if k not in sent} for r in zero] == [{k: v for k, v in r.items() if k not in sent} for r in plain]  # beta 0: FedAvg bitwise
    assert [z["bytes_down"] - p["bytes_down"] for z, p in zip(zero, plain)] == [8 * len(p["clients"]) for p in plain]  # but for beta itself, a float sent to each client
    assert records(cfg.with_overrides({"executor": "processes", "threads": 1})) == seq  # one float path: bitwise
    # vectorized: the first round only. The term divides by each dimension's std over the batch, so a dimension almost
    # constant over a batch (a ReLU unit off for most samples) magnifies the batched kernels' rounding: the two executors'
    # runs part faster than without the term (docs/methods.md); the sequential executor at 2 threads against 1 parts as fast.
    vec = records(cfg.with_overrides({"executor": "vectorized"}))  # really vmapped: tests/conftest.py makes a fallback an error
    assert_records_close(seq[:1], vec[:1])


@pytest.mark.parametrize(("options", "field"), [({"beta": -0.1}, "objective.terms[0].beta"), ({"tau": 1.0}, "objective.terms[0]")])
def test_option_errors_name_the_objective_terms_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(config(**RUN, **{"objective.terms": [{"name": "decorr", **options}]}))
    assert info.value.field.startswith(field)

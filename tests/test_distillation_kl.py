"""The one temperature-scaled distillation loss FedPHP's KD and FML's mutual KL share, on values worked out by hand (T = 2)."""

from __future__ import annotations

import math

import pytest
import torch

from chillfl.training.objective import distillation_kl

LN3 = math.log(3)


def test_distillation_kl_by_hand_at_t_2() -> None:
    # teacher (2 ln 3, 0) / T=2 = (ln 3, 0) -> p = (3/4, 1/4); student (0, 0) at T = 1 -> q = (1/2, 1/2)
    # KL(p || q) = 3/4 ln(3/2) + 1/4 ln(1/2) = 0.304099 - 0.173287 = 0.130812
    # cross-entropy -sum p ln q = ln 2 = 0.693147 = KL + H(p), H(p) = -(3/4 ln 3/4 + 1/4 ln 1/4) = 0.562335
    teacher, student = torch.tensor([[2 * LN3, 0.0]]), torch.zeros(1, 2)
    assert float(distillation_kl(student, teacher, 2.0)) == pytest.approx(0.130812, abs=1e-6)
    assert float(distillation_kl(student, teacher, 2.0, cross_entropy=True)) == pytest.approx(math.log(2), abs=1e-6)
    assert float(distillation_kl(student, teacher, 2.0, reduction="mean")) == pytest.approx(0.065406, abs=1e-6)  # / 2 classes too
    # student (ln 3, 0) -> q = p: KL 0, the cross-entropy is the teacher's entropy
    match = torch.tensor([[LN3, 0.0]])
    assert float(distillation_kl(match, teacher, 2.0)) == pytest.approx(0.0, abs=1e-7)
    assert float(distillation_kl(match, teacher, 2.0, cross_entropy=True)) == pytest.approx(0.562335, abs=1e-6)
    # batchmean: the two rows' sums averaged: KL (0.130812 + 0) / 2, cross-entropy (0.693147 + 0.562335) / 2
    both, teachers = torch.cat([student, match]), teacher.expand(2, 2)
    assert float(distillation_kl(both, teachers, 2.0)) == pytest.approx(0.065406, abs=1e-6)
    assert float(distillation_kl(both, teachers, 2.0, cross_entropy=True)) == pytest.approx(0.627741, abs=1e-6)


def test_the_gradient_into_the_student_is_softmax_minus_the_softened_teacher() -> None:
    # d/dz KL(p || softmax(z)) = softmax(z) - p = (1/2 - 3/4, 1/2 - 1/4) = (-1/4, 1/4); the same for the cross-entropy form
    for cross_entropy in (False, True):
        student = torch.zeros(1, 2, requires_grad=True)
        distillation_kl(student, torch.tensor([[2 * LN3, 0.0]]), 2.0, cross_entropy=cross_entropy).backward()
        assert student.grad is not None
        torch.testing.assert_close(student.grad, torch.tensor([[-0.25, 0.25]]))

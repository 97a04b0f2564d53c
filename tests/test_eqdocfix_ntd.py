"""FedNTD's teacher keeps a float64 run's dtype (it was rounded to float32: 1e-9 off a float64 reference), and raises only
half precision (float16, bfloat16) to float32, as the student's bf16 logits are."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from chillfl.training.term_kinds.ntd import NtdTerm, teacher_logits
from chillfl.training.terms import StepView


def _step(model: nn.Module, x: torch.Tensor, logits: torch.Tensor | None = None) -> StepView:
    y = torch.tensor([0, 1, 2, 0, 1])
    return StepView(model, x, y, x, torch.zeros(5, 3, dtype=x.dtype) if logits is None else logits, torch.zeros((), dtype=x.dtype), {})


def test_a_float64_teacher_is_the_models_float64_logits_exactly() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3).double()
    x = torch.randn(5, 4, dtype=torch.float64) * 3.0
    anchor = {k: v.detach() + 0.1 for k, v in model.state_dict().items()}
    got = teacher_logits(_step(model, x), anchor)
    assert got.dtype == torch.float64
    assert torch.equal(got, torch.func.functional_call(model, anchor, (x,)).detach())


def test_at_the_rounds_start_a_float64_student_is_its_teacher_exactly() -> None:
    # the student's own float64 logits against an unrounded teacher: the not-true KL is 0 exactly, not float32 rounding's
    torch.manual_seed(1)
    model = nn.Linear(4, 3).double()
    x = torch.randn(5, 4, dtype=torch.float64) * 3.0
    params = {k: v.detach().clone().requires_grad_(True) for k, v in model.named_parameters()}
    logits = torch.func.functional_call(model, params, (x,))
    value = NtdTerm()(params, {"ntd_beta": 1.0, "ntd_tau": 3.0, "global_params": {k: v.detach() for k, v in params.items()}}, _step(model, x, logits))
    assert value.dtype == torch.float64 and value.item() == 0.0


@pytest.mark.parametrize(("dtype", "expected"), [(torch.bfloat16, torch.float32), (torch.float16, torch.float32), (torch.float32, torch.float32)])
def test_half_precision_teachers_are_raised_to_float32_and_float32_kept(dtype: torch.dtype, expected: torch.dtype) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 3).to(dtype)
    x = torch.randn(5, 4).to(dtype)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    got = teacher_logits(_step(model, x), state)
    assert got.dtype == expected
    assert torch.equal(got, torch.func.functional_call(model, state, (x,)).detach().to(expected))

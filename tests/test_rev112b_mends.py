"""The privacy check of released soft-label rows uses the analysis commands' row-sum bound: its ``classes * eps`` rule
passed an all-zero bfloat16 row at 128 classes and bfloat16 rows summing to 0.3 at 100 (rev112b 4)."""
from __future__ import annotations

import torch

from chillfl.numeric import row_sum_tolerance
from chillfl.privacy.softlabels import row_problem


def test_an_all_zero_bf16_row_is_no_release_of_probabilities() -> None:
    rows = torch.full((2, 128), 1 / 128)
    assert row_problem(torch.zeros(2, 128, dtype=torch.bfloat16), rows, probabilities=True) is not None
    short = torch.full((2, 100), 0.003).to(torch.bfloat16)  # sums to about 0.3
    assert row_problem(short, rows[:, :100], probabilities=True) is not None


def test_a_bf16_softmax_row_still_passes() -> None:
    logits = torch.randn(4, 128, generator=torch.Generator().manual_seed(0))
    released = torch.softmax(logits, dim=-1).to(torch.bfloat16)
    assert row_problem(released, released.float(), probabilities=True) is None


def test_the_bound_by_hand() -> None:
    assert row_sum_tolerance(torch.bfloat16, 128) == 2 * 2**-7 + 128 * 2**-126 * 2**-7 / 2  # 1.5625e-2 and a speck
    assert row_sum_tolerance(torch.float64, 10) == 1e-3

"""rev111 4: the soft-label row tolerance bounds a stored row's rounding for any class count.

A float16 entry under 2**-14 (subnormal) is off its value by up to half the smallest subnormal, 2**-25 = 3e-8, not
eps / 2 of it, and one under 2**-25 is stored as 0: a confident softmax over 128,256 classes (a vocabulary) moved its
sum by 3.7e-3 in the cast, past the old ``2 * eps`` = 1.95e-3, and was refused. The bound now adds
``classes * tiny * eps / 2`` (2**-25 a class in float16, nothing that counts in bfloat16 or float32).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from chillfl.analysis.cache_ratio import load_soft_labels, row_sum_tolerance
from chillfl.errors import ConfigError

VOCAB = 128_256


def _confident(gap: float, dtype: torch.dtype) -> torch.Tensor:
    """One row: a float32 softmax whose top logit is ``gap`` above the other VOCAB - 1, cast to ``dtype``."""
    z = torch.full((1, VOCAB), -gap)
    z[0, 0] = 0
    return torch.softmax(z, -1).to(dtype)


def test_the_tolerance_by_hand() -> None:
    """float16: eps = 2**-10, tiny = 2**-14, so 2 eps + C 2**-25; bfloat16 and float32 keep 2 eps and 1e-3."""
    assert row_sum_tolerance(torch.float16, VOCAB) == 2**-9 + VOCAB * 2**-25
    assert row_sum_tolerance(torch.float16, 10) == 2**-9 + 10 * 2**-25
    assert row_sum_tolerance(torch.bfloat16, VOCAB) == 2**-6  # + 128,256 * 2**-134, lost in the float64 sum
    assert row_sum_tolerance(torch.float32, VOCAB) == 1e-3


@pytest.mark.parametrize("gap", [17.3, 17.5])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_confident_vocabulary_softmax_is_accepted(tmp_path: Path, gap: float, dtype: torch.dtype) -> None:
    """float16 at gap 17.3 summed to 1.00374 (tail entries 3.1e-8 stored as 2**-24) and at 17.5 to 0.99707 (2.5e-8
    stored as 0): both were refused (within 0.00195). Each loaded row is divided by its sum."""
    row = _confident(gap, dtype)
    torch.save(row, tmp_path / "conf.pt")
    loaded = load_soft_labels(str(tmp_path / "conf.pt"))
    assert loaded.shape == (1, VOCAB) and abs(float(loaded.sum()) - 1) < 1e-12


@pytest.mark.parametrize("tail, stored", [(2.9e-8, 0.0), (3.0e-8, 2**-24)])
def test_the_bound_holds_where_every_tail_entry_rounds_the_same_way(tail: float, stored: float) -> None:
    """A row summing to 1 exactly, its VOCAB - 1 tail entries just under / over 2**-25: the cast flushes each to 0 or
    lifts it to 2**-24, the sum moving by (VOCAB - 1) * 2.9e-8 = 3.7e-3 or (VOCAB - 1) * (2**-24 - 3e-8) = 3.8e-3, both
    past 2 eps and within the new bound."""
    row = torch.full((VOCAB,), tail, dtype=torch.float64)
    row[0] = 1 - (VOCAB - 1) * tail
    half = row.to(torch.float16)
    assert float(half[1]) == stored
    moved = abs(float(half.to(torch.float64).sum()) - 1)
    assert 2**-9 < moved <= row_sum_tolerance(torch.float16, VOCAB)


@pytest.mark.parametrize("dtype, within", [(torch.float16, "0.00578"), (torch.bfloat16, "0.0156")])
def test_an_all_zero_vocabulary_row_is_still_refused(tmp_path: Path, dtype: torch.dtype, within: str) -> None:
    rows = torch.cat([_confident(17.3, dtype), torch.zeros(1, VOCAB, dtype=dtype)])
    torch.save(rows, tmp_path / "zero.pt")
    with pytest.raises(ConfigError) as err:
        load_soft_labels(str(tmp_path / "zero.pt"))
    assert err.value.field == "--soft-labels" and f"row 1 sums to 0; each row must sum to 1 (within {within})" in err.value.message

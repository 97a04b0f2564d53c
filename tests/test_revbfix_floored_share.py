"""Review rev99b, finding 2: floored_share floored 1/3 and 2/3 as their shortest decimals (0.333...3, 0.666...6),
which lie just below them, so a trimmed mean of three clients at beta = 1/3 trimmed nobody and DnC removed one client
fewer than floor(c f)."""

from __future__ import annotations

import torch

from chillfl.aggregation.dnc import DnCOptions
from chillfl.aggregation.robust import trimmed_mean
from chillfl.numeric import floored_share, rounded_share


def test_floored_share_of_never_ending_fractions() -> None:
    assert floored_share(1 / 3, 3) == 1 and floored_share(2 / 3, 3) == 2 and floored_share(2 / 3, 6) == 4
    assert floored_share(0.3333333333333333, 3) == 1  # as TOML reads it


def test_floored_share_keeps_what_was_right() -> None:
    assert floored_share(0.29, 100) == 29 and floored_share(0.5, 7) == 3 and floored_share(0.0, 9) == 0
    assert floored_share(0.1234567, 10**7) == 1234567  # no short fraction is this float: the decimal as written
    assert floored_share(0.3333333, 3 * 10**7) == 9999999  # a decimal near 1/3 is not taken for it


def test_the_robust_rules_count_a_third_of_three() -> None:
    values = torch.tensor([[0.0], [1.0], [100.0]])
    assert trimmed_mean(values, 1 / 3).item() == 1.0  # the median, the outlier trimmed
    assert DnCOptions(f=3, c=2 / 3).removed() == 2 and DnCOptions(f=6, c=1 / 3).removed() == 2


def test_rounded_share_takes_the_fraction_as_meant() -> None:
    """5/6 of 3 clients is 2.5, which rounds half to even to 2; its shortest decimal (0.8333333333333334) gave 2.5000000000000002 -> 3."""
    assert rounded_share(5 / 6, 3) == 2 and rounded_share(1 / 6, 3) == 0 and rounded_share(7 / 6, 3) == 4
    assert rounded_share(0.35, 90) == 32 and rounded_share(0.14, 75) == 10  # the decimals as written, as before

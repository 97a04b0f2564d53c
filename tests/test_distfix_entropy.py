"""soft_label_entropy is null where the server's target rows are not probability vectors (distbase finding 4)."""

from __future__ import annotations

import math

import pytest
import torch

from test_distillation_protocol import run

pytestmark = pytest.mark.usefixtures("one_thread")


def test_mean_entropy_by_hand() -> None:
    from chillfl.protocols.softlabels.server import mean_entropy  # here: the run test below stands without it

    # [0.5, 0.5, 0]: ln 2; [1, 0, 0]: 0; mean ln 2 / 2
    assert mean_entropy(torch.tensor([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])) == pytest.approx(math.log(2) / 2)
    # an all-zero row (CFD 1-bit with no class above 0.5) is not a distribution: it read 0.0 nats, "confident"
    assert mean_entropy(torch.tensor([[0.0, 0.0, 0.0]])) is None
    assert mean_entropy(torch.tensor([[0.5, 0.5, 0.0], [0.25, 0.0, 0.0]])) is None  # one sub-normalised row is enough
    assert mean_entropy(torch.tensor([[1.2, -0.2, 0.0]])) is None  # sums to 1 but not a distribution
    assert mean_entropy(torch.zeros((0, 3))) is None


def test_cfd_default_logs_null_and_full_precision_a_number() -> None:
    # 1-bit uniform: near-uniform first-round models put nothing above 0.5, so the averaged rows are (mostly) empty
    quantised = run("cfd", **{"federation.rounds": 1})
    assert quantised[0]["soft_label_entropy"] is None
    full = run("cfd", bits_up=32, **{"federation.rounds": 1})  # the mean of softmax rows: a distribution per row
    value = full[0]["soft_label_entropy"]
    assert value is not None and 0.0 < value <= math.log(10) + 1e-6

"""Centred linear CKA over two inputs is 1 whatever the models (the centred rows are x and -x): ``analyze cka --samples
2`` printed 1.0000 for every layer (metcalc). It is NaN there now, and the command asks for 3 inputs (2 uncentred)."""

from __future__ import annotations

import argparse
import math

import pytest
import torch

from chillfl.analysis.cka import cmd_cka
from chillfl.errors import ConfigError
from chillfl.metrics.cka import linear_cka


def test_two_centred_inputs_say_nothing_and_give_nan() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(2, 5, generator=g), torch.randn(2, 7, generator=g)
    assert math.isnan(linear_cka(x, y))
    # uncentred, two inputs still carry information: <K_X, K_Y> / (|K_X| |K_Y|) with the 2 x 2 Gram matrices, by hand
    kx, ky = x.double() @ x.double().T, y.double() @ y.double().T
    expected = float((kx * ky).sum() / (kx.norm() * ky.norm()))
    assert linear_cka(x, y, center=False) == pytest.approx(expected, rel=1e-12)
    assert linear_cka(torch.randn(3, 5, generator=g), torch.randn(3, 7, generator=g)) < 1  # three inputs: a real value


@pytest.mark.parametrize(("samples", "uncentered", "refused"), [(2, False, True), (1, True, True), (2, True, False)])
def test_the_command_asks_for_three_centred_inputs(samples: int, uncentered: bool, refused: bool) -> None:
    args = argparse.Namespace(samples=samples, uncentered=uncentered, start=None, clients=False, layers="")
    if refused:
        with pytest.raises(ConfigError, match=r"--samples: CKA needs at least") as info:
            cmd_cka(args)
        assert ("--uncentered takes 2" in info.value.message) is (not uncentered)
    else:  # past the count: the next check (an empty --layers) is the one that refuses
        with pytest.raises(ConfigError, match=r"--layers"):
            cmd_cka(args)

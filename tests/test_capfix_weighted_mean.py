"""A round's ``train_loss`` is the clients' losses weighted by their samples, summed exactly (``math.fsum``): the same bits
on every CPU. Before, it went through ``np.dot`` (BLAS ``ddot``), whose summation order is the OpenBLAS kernel's:
``OPENBLAS_CORETYPE=Haswell`` and ``SkylakeX`` gave 1.2488999374468361 and 1.248899937446836 of the same clients' losses
on one machine, and no record named the kernel."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pytest

import chillfl
from chillfl.experiment import build_experiment
from chillfl.numeric import weighted_mean
from methods_e2e import config


def exact(values: Sequence[float], weights: Sequence[int]) -> float:
    """The definition: the exactly rounded sum of the products over the exactly rounded sum of the weights."""
    return math.fsum(w * v for v, w in zip(values, weights)) / math.fsum(weights)


def test_the_mean_is_summed_exactly_where_left_to_right_order_loses_a_term() -> None:
    # 1e16 + 1 rounds back to 1e16 (its spacing is 2), so a left-to-right sum (and np.dot's) is 0 and the mean 0;
    # the exact sum is 1, the mean 1/3.
    assert 1e16 + 1.0 - 1e16 == 0.0
    assert weighted_mean([1e16, 1.0, -1e16], [1, 1, 1]) == 1 / 3
    # the same with weights: (2 * 5e15 + 3 * 1 - 1e16) / (2 + 3 + 1) = 3 / 6
    assert weighted_mean([5e15, 1.0, -1e16], [2, 3, 1]) == 0.5
    # where no rounding intervenes it is the plain weighted mean: (10 * 1.5 + 30 * 0.5) / 40 = 0.75
    assert weighted_mean([1.5, 0.5], [10, 30]) == 0.75


def test_the_order_of_the_clients_does_not_move_a_bit() -> None:
    values, weights = [0.1, 0.7, 1e-17, 0.3, 2.9], [3, 7, 11, 5, 2]
    forward = weighted_mean(values, weights)
    assert forward == weighted_mean(values[::-1], weights[::-1]) == exact(values, weights)


def test_no_weight_is_no_mean_and_a_non_finite_loss_stays_visible() -> None:
    assert math.isnan(weighted_mean([1.0, 2.0], [0, 0]))
    assert math.isnan(weighted_mean([math.nan, 1.0], [1, 1]))
    assert weighted_mean([math.inf, 1.0], [1, 1]) == math.inf
    assert math.isnan(weighted_mean([math.inf, -math.inf], [1, 1]))  # fsum refuses inf - inf: NaN, as a plain sum gives
    assert weighted_mean([1e308, 1e308], [1, 1]) == math.inf  # a sum past the float range (fsum's OverflowError)
    with pytest.raises(ValueError, match="2 values but 1 weights"):
        weighted_mean([1.0, 2.0], [1])


def _round_means(over: dict[str, Any]) -> list[tuple[float, float]]:
    """(recorded train_loss, its exact definition from the record's client losses and the clients' train sizes)."""
    cfg = config(**{"model.name": "mlp", **over})
    sizes = build_experiment(cfg).data.train_sizes()
    out = []
    for record in chillfl.run(config=cfg, write=False, progress=False).records:
        losses = record["client_train_loss"]
        ids = sorted(losses, key=int)
        out.append((record["train_loss"], exact([losses[c] for c in ids], [int(sizes[int(c)]) for c in ids])))
    return out


SOFT_LABELS = {"distillation.method": "dsfl", "distillation.public_size": 40, "distillation.subset_size": 20, "distillation.server_epochs": 1,
               "distillation.distill_batch_size": 32}


@pytest.mark.parametrize("over", [{}, {"prototypes.method": "fedproto"}, SOFT_LABELS], ids=["parameters", "prototypes", "soft labels"])
def test_a_runs_train_loss_is_the_exact_weighted_mean_of_its_clients_losses(over: dict[str, Any]) -> None:
    """Every protocol records each client's loss (``client_train_loss``; soft-label records had none until the one
    builder, ``ServerBook.round_record``), so the mean is checked from the record alike."""
    means = _round_means(over)
    assert len(means) == 3
    assert [recorded for recorded, _ in means] == [wanted for _, wanted in means]

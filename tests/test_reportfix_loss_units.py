"""The loss-growth rule (``engine/health.py``) compares losses in T = 1 units, each at its own round's smallest training
temperature: CE(z / T) grows like 1 / T, so a policy that lowers T across rounds (FedChill's decay on stagnation) raised
a healthy run's raw loss 1e4-fold as T fell 1e4-fold, and the raw comparison warned it (stopped it under ``strict``)."""

from __future__ import annotations

import pytest

from chillfl.engine.health import LossWatch, loss_explosion
from chillfl.errors import Diverged


def test_t1_units_by_hand() -> None:
    from chillfl.engine.health import t1_units

    assert t1_units(500.0, 1e-4) == pytest.approx(0.05)
    assert t1_units(500.0, None) == 500.0  # no temperature recorded: raw, as before
    assert t1_units(2.0, 4.0) == 2.0  # above T = 1 unchanged, as the ceiling is


def test_a_loss_growing_exactly_as_t_falls_is_not_flagged() -> None:
    watch = LossWatch(True)  # strict: a flag would raise
    watch.observe({"round": 1, "train_loss": 0.05, "temperature_mean": 1.0})
    watch.observe({"round": 2, "train_loss": 5.0, "temperature_mean": 1e-2})
    watch.observe({"round": 3, "train_loss": 500.0, "temperatures": {"0": 1e-4, "1": 1e-3}})  # per-client T: the smallest
    assert loss_explosion(500.0, 0.05, 1e-4, 1.0) is None  # 500 * 1e-4 = 0.05 = 0.05 * 1: no growth at all


def test_a_resumed_run_reads_round_1s_temperature_from_its_records() -> None:
    """A resume rebuilds the watch from metrics.jsonl (no checkpoint field): round 1's T comes from the same record."""
    watch = LossWatch(True, [{"round": 1, "train_loss": 0.05, "temperature_mean": 1.0}, {"round": 2, "train_loss": 0.5, "temperature_mean": 0.1}])
    watch.observe({"round": 3, "train_loss": 500.0, "temperature_mean": 1e-4})


def test_a_real_growth_at_constant_t_is_still_flagged() -> None:
    assert loss_explosion(500.0, 0.05, 1e-4, 1e-4) is not None  # 0.05 -> 500 at the same T: 1e4-fold
    assert loss_explosion(500.0, 0.05, 1.0, 1.0) == "is 1e+04 times round 1's 0.05"
    assert loss_explosion(500.0, 0.05) == "is 1e+04 times round 1's 0.05"  # no temperature recorded: raw, as before
    watch = LossWatch(True)
    watch.observe({"round": 1, "train_loss": 0.05, "temperature_mean": 1e-4})
    with pytest.raises(Diverged) as err:
        watch.observe({"round": 2, "train_loss": 500.0, "temperature_mean": 1e-4})
    assert err.value.round == 2 and "is 1e+04 times round 1's in T = 1 units (now 0.05, round 1 5e-06)" in err.value.what  # the values compared


def test_a_growth_in_t1_units_past_a_falling_t_is_flagged() -> None:
    """T falls 10-fold and the loss grows 1e5-fold: 1e4-fold in T = 1 units, flagged."""
    watch = LossWatch(True)
    watch.observe({"round": 1, "train_loss": 0.05, "temperature_mean": 1.0})
    with pytest.raises(Diverged):
        watch.observe({"round": 2, "train_loss": 5000.0, "temperature_mean": 0.1})


def test_a_round_in_t1_units_is_the_mean_of_each_clients_scaled_loss() -> None:
    """Per-client T: each client's loss times its own T (below 1), then the plain mean; not the mean times the least T."""
    from chillfl.engine.health import t1_loss

    record = {"round": 1, "train_loss": 2.28, "client_train_loss": {"0": 0.56, "1": 4.0}, "temperatures": {"0": 1e-4, "1": 1.0}}
    assert t1_loss(record) == pytest.approx((0.56 * 1e-4 + 4.0) / 2)
    assert t1_loss({"round": 1, "train_loss": 2.28, "client_train_loss": {"0": 0.56, "1": 4.0}, "temperatures": {"0": 2.0, "1": 1.0}}) == 2.28  # no T below 1: raw, as before
    assert t1_loss({"round": 1, "train_loss": 2.28, "temperatures": {"0": 1e-4, "1": 1.0}}) == pytest.approx(2.28e-4)  # no per-client losses: the least T
    assert t1_loss({"round": 1, "train_loss": 2.28, "client_train_loss": {"0": 0.56, "2": 4.0}, "temperatures": {"0": 1e-4, "1": 1.0}}) == pytest.approx(2.28e-4)  # a client without T
    assert t1_loss({"round": 1, "train_loss": None}) is None


def test_a_tiny_t_client_in_round_1_does_not_make_an_unchanged_loss_a_growth() -> None:
    """The reviewer's case: round 1 has one client at T = 1e-4 beside one at T = 1; round 2 the same loss at T = 1."""
    watch = LossWatch(True)  # strict: a flag would raise
    watch.observe({"round": 1, "train_loss": 2.28, "client_train_loss": {"0": 0.56, "1": 4.0}, "temperatures": {"0": 1e-4, "1": 1.0}})
    watch.observe({"round": 2, "train_loss": 2.28, "client_train_loss": {"2": 2.28, "3": 2.28}, "temperatures": {"2": 1.0, "3": 1.0}})
    resumed = LossWatch(True, [{"round": 1, "train_loss": 2.28, "client_train_loss": {"0": 0.56, "1": 4.0}, "temperatures": {"0": 1e-4, "1": 1.0}}])
    resumed.observe({"round": 2, "train_loss": 2.28, "client_train_loss": {"2": 2.28, "3": 2.28}, "temperatures": {"2": 1.0, "3": 1.0}})


def test_a_real_growth_with_per_client_temperatures_is_flagged_with_the_scaled_values() -> None:
    """Round 1: (1e-4 * 1e-4 + 1e-4 * 1) / 2 = 5.0005e-5 in T = 1 units; round 2: (1 * 1 + 1 * 0.5) / 2 = 0.75, 1.5e4-fold."""
    watch = LossWatch(True)
    watch.observe({"round": 1, "train_loss": 1e-4, "client_train_loss": {"0": 1e-4, "1": 1e-4}, "temperatures": {"0": 1e-4, "1": 1.0}})
    with pytest.raises(Diverged) as err:
        watch.observe({"round": 2, "train_loss": 1.0, "client_train_loss": {"0": 1.0, "1": 1.0}, "temperatures": {"0": 1.0, "1": 0.5}})
    assert "training loss 1 is 1.5e+04 times round 1's in T = 1 units (now 0.75, round 1 5e-05)" in err.value.what

"""FedChill temperature initialisation (Eq. 7) and adaptive decay (Algorithm 1, Eq. 8)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from chillfl.errors import ConfigError
from chillfl.options import parse_options
from chillfl.temperature.fedchill import (
    VARIANTS,
    ClientTemperatureState,
    FedChillOptions,
    FedChillPolicy,
    decay_step,
    initial_temperature,
)

# ------------------------------------------------------------------ Eq. 7


def test_initial_temperature_by_hand() -> None:
    assert initial_temperature(0.0) == pytest.approx(1.0)  # exp(0)
    assert initial_temperature(0.5, s=2.0) == pytest.approx(0.367879, abs=1e-6)  # exp(-1)
    assert initial_temperature(1.0, s=2.0) == pytest.approx(0.135335, abs=1e-6)  # exp(-2)
    assert initial_temperature(0.5, t_max=0.5, s=2.0) == pytest.approx(0.183940, abs=1e-6)  # 0.5 exp(-1)


def test_initial_temperature_clips_to_range() -> None:
    # exp(-4) = 0.0183 < T_min = 0.05 -> 0.05
    assert initial_temperature(1.0, t_min=0.05, s=4.0) == pytest.approx(0.05)
    # negative h would give exp(+) > T_max -> T_max
    assert initial_temperature(-1.0, t_max=1.0) == pytest.approx(1.0)


# ------------------------------------------------------------------ Algorithm 1


def _run(accuracies: list[float], t0: float = 1.0, **kwargs: object) -> tuple[list[float], list[int]]:
    state = ClientTemperatureState(temperature=t0)
    temps, counters = [], []
    for a in accuracies:
        state = decay_step(state, a, **kwargs)  # type: ignore[arg-type]
        temps.append(state.temperature)
        counters.append(state.counter)
    return temps, counters


ACC = [0.5, 0.6, 0.6, 0.55, 0.7, 0.7, 0.7, 0.6]


def test_decay_sequence_compare_previous() -> None:
    # P = 2, gamma = 0.5, T_min = 0.05; compare a_k with A[-2] (the previous round), |A| >= 3
    # r1 |A|=1 -> c0 | r2 |A|=2 -> c0 | r3 .6<=.6 c1 | r4 .55<=.6 c2 -> T=.5, c0
    # r5 .7>.55 c0 | r6 .7<=.7 c1 | r7 .7<=.7 c2 -> T=.25, c0 | r8 .6<=.7 c1
    temps, counters = _run(ACC, patience=2, gamma=0.5, t_min=0.05, compare="previous")
    assert temps == pytest.approx([1, 1, 1, 0.5, 0.5, 0.5, 0.25, 0.25])
    assert counters == [0, 0, 1, 0, 0, 1, 0, 1]


def test_decay_sequence_compare_two_back() -> None:
    # compare a_k with A[-3] (two rounds ago)
    # r3 .6 vs .5 -> c0 | r4 .55 vs .6 -> c1 | r5 .7 vs .6 -> c0 | r6 .7 vs .55 -> c0
    # r7 .7 vs .7 -> c1 | r8 .6 vs .7 -> c2 -> T = .5, c0
    temps, counters = _run(ACC, patience=2, gamma=0.5, t_min=0.05, compare="two_back")
    assert temps == pytest.approx([1, 1, 1, 1, 1, 1, 1, 0.5])
    assert counters == [0, 0, 0, 1, 0, 0, 1, 0]


def test_short_history_never_counts() -> None:
    # even with P = 1 and equal accuracies, nothing happens before |A| = 3
    temps, counters = _run([0.4, 0.4, 0.4], patience=1, gamma=0.5, t_min=0.05)
    assert temps == pytest.approx([1.0, 1.0, 0.5])
    assert counters == [0, 0, 0]


def test_floor_behaviour() -> None:
    # T = 0.06 > 1.1 * 0.05 = 0.055 -> max(0.5 * 0.06, 0.05) = 0.05, counter reset;
    # then T = 0.05 <= 0.055: no decay and (Algorithm 1 line 15 is skipped) the counter keeps growing
    temps, counters = _run([0.3] * 7, t0=0.06, patience=2, gamma=0.5, t_min=0.05)
    assert temps == pytest.approx([0.06, 0.06, 0.06, 0.05, 0.05, 0.05, 0.05])
    assert counters == [0, 0, 1, 0, 1, 2, 3]
    # T = 0.054 is within 1.1 T_min: never decays although it is above T_min
    temps, _ = _run([0.3] * 6, t0=0.054, patience=1, gamma=0.5, t_min=0.05)
    assert temps == pytest.approx([0.054] * 6)
    # T = 0.056 > 0.055: one decay straight to the floor, max(0.028, 0.05) = 0.05
    temps, _ = _run([0.3] * 3, t0=0.056, patience=1, gamma=0.5, t_min=0.05)
    assert temps == pytest.approx([0.056, 0.056, 0.05])


def test_decay_step_is_pure() -> None:
    state = ClientTemperatureState(temperature=1.0, history=[0.5, 0.5], counter=0)
    new = decay_step(state, 0.5, patience=1, gamma=0.5, t_min=0.05)
    assert new.temperature == pytest.approx(0.5)
    assert state.history == [0.5, 0.5] and state.temperature == 1.0 and state.counter == 0
    assert new.history == [0.5, 0.5, 0.5]


# ------------------------------------------------------------------ options


def test_options_defaults_follow_the_paper() -> None:
    o = FedChillOptions()
    assert (o.t_max, o.t_min, o.s, o.patience, o.compare) == (1.0, 0.05, 2.0, 2, "previous")
    assert o.gamma in (0.8, 0.95)


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ({"gamma": 1.0}, "temperature.gamma"),
        ({"t_min": 0.0}, "temperature.t_min"),
        ({"t_max": 0.01}, "temperature.t_max"),
        ({"patience": 0}, "temperature.patience"),
        ({"measure": "emd"}, "temperature.measure"),
        ({"normalisation": "none"}, "temperature.normalisation"),
        ({"compare": "three_back"}, "temperature.compare"),
        ({"t_start": 2.0}, "temperature.t_start"),
        ({"p_g": [0.5, 0.0]}, "temperature.p_g"),
        ({"tmax": 1.0}, "temperature.tmax"),
    ],
)
def test_options_validation(table: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_options(FedChillOptions, table, "temperature")
    assert info.value.field == field


# ------------------------------------------------------------------ policy

COUNTS = np.array([[5, 5, 5], [3, 1, 0], [0, 0, 6]])
# ratio scores (C = 3, max 4): 0, 2.5/4 = 0.625, 1 -> T0 = 1, exp(-1.25) = 0.286505, exp(-2) = 0.135335


def test_policy_initial_temperatures() -> None:
    policy = FedChillPolicy(FedChillOptions(), COUNTS)
    np.testing.assert_allclose(policy.initial_heterogeneity, [0.0, 0.625, 1.0])
    snap = policy.snapshot()
    assert list(snap) == [0, 1, 2]
    np.testing.assert_allclose([snap[0], snap[1], snap[2]], [1.0, 0.286505, 0.135335], atol=1e-6)
    assert policy.temperature(1, 0) == pytest.approx(0.286505, abs=1e-6)


def test_policy_variants_of_table4() -> None:
    decay_only = FedChillPolicy(FedChillOptions(**VARIANTS["decay_only"], t_start=0.5), COUNTS)
    assert list(decay_only.snapshot().values()) == [0.5, 0.5, 0.5]
    init_only = FedChillPolicy(FedChillOptions(**VARIANTS["init_only"]), COUNTS)
    for r in range(5):
        init_only.observe(2, r, 0.1)  # stagnating, but decay is off
    assert init_only.temperature(2, 5) == pytest.approx(math.exp(-2))


def test_policy_state_persists_for_unsampled_clients() -> None:
    policy = FedChillPolicy(FedChillOptions(patience=1, gamma=0.5), COUNTS)
    # client 0 trains in rounds 0, 1, 2 with flat accuracy: at round 2 |A| = 3, .5 <= .5 -> decay 1 -> .5
    for r in range(3):
        policy.observe(0, r, 0.5)
    # client 1 trains only at round 3: its own history has one entry -> unchanged
    policy.observe(1, 3, 0.2)
    snap = policy.snapshot()
    np.testing.assert_allclose([snap[0], snap[1], snap[2]], [0.5, 0.286505, 0.135335], atol=1e-6)
    assert policy.state(1).history == [0.2]
    assert policy.state(2).history == []


def test_policy_state_dict_roundtrip_through_json() -> None:
    options = FedChillOptions(patience=1, gamma=0.5)
    a = FedChillPolicy(options, COUNTS)
    for r in range(3):
        a.observe(0, r, 0.5)
    b = FedChillPolicy(options, COUNTS)
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert b.snapshot() == a.snapshot()
    a.observe(0, 3, 0.4)
    b.observe(0, 3, 0.4)  # .4 <= .5 -> another decay on both: .25
    assert b.temperature(0, 4) == a.temperature(0, 4) == pytest.approx(0.25)


def test_policy_errors() -> None:
    policy = FedChillPolicy(FedChillOptions(), COUNTS)
    with pytest.raises(ConfigError, match="temperature.decay"):
        policy.observe(0, 0, None)
    with pytest.raises(KeyError):
        policy.temperature(3, 0)
    with pytest.raises(ConfigError, match="temperature.p_g"):
        FedChillPolicy(FedChillOptions(p_g=[0.5, 0.5]), COUNTS)
    with pytest.raises(ValueError):
        policy.load_state_dict({"clients": []})

"""Absurd training temperatures are refused at config time, naming the field, instead of diverging in round 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.errors import ConfigError
from chillfl.temperature.base import MAX_TEMPERATURE, MIN_TEMPERATURE, FixedOptions
from chillfl.temperature.fedchill import FedChillOptions, decay_step, initial_temperature, start_temperature


@pytest.mark.parametrize("value", [1e-30, 1e-6, 0.0, -1.0, float("nan"), float("inf")])
def test_fixed_refuses_a_temperature_below_the_floor(value: float) -> None:
    with pytest.raises(ConfigError, match=r"temperature\.value: must be a temperature in \[0\.0001, 10000\]"):
        FixedOptions(value).validate("temperature")


def test_fixed_accepts_the_floor_and_the_usual_range() -> None:
    for value in (MIN_TEMPERATURE, 0.05, 1.0, 4.0, 100.0, MAX_TEMPERATURE):
        FixedOptions(value).validate("temperature")


@pytest.mark.parametrize("value", [1e308, 1e30, MAX_TEMPERATURE * 1.5])
def test_a_temperature_above_the_ceiling_is_refused(value: float) -> None:
    """A fuzzer's 1e308 (float32's inf) ran every round at loss exactly ln K: every step shrinks by 1/T, nothing trained."""
    with pytest.raises(ConfigError, match=r"temperature\.value: must be a temperature in \[0\.0001, 10000\].*nothing trains"):
        FixedOptions(value).validate("temperature")
    with pytest.raises(ConfigError, match=r"temperature\.t_max: must be a temperature in"):
        FedChillOptions(t_max=value).validate("temperature")


def test_fedchill_t_min_is_the_floor_of_every_temperature() -> None:
    with pytest.raises(ConfigError, match=r"temperature\.t_min: must be a temperature in \[0\.0001, 10000\]"):
        FedChillOptions(t_min=1e-30).validate("temperature")
    with pytest.raises(ConfigError, match=r"temperature\.t_start"):  # below t_min, so below the floor
        FedChillOptions(init=False, t_start=1e-30).validate("temperature")
    o = FedChillOptions(t_min=MIN_TEMPERATURE, t_max=MIN_TEMPERATURE * 2, s=100.0)
    o.validate("temperature")
    assert start_temperature(o, 1.0) == initial_temperature(1.0, o.t_max, o.t_min, o.s) == MIN_TEMPERATURE  # Eq. 7 clips to it
    from chillfl.temperature.fedchill import ClientTemperatureState

    state = ClientTemperatureState(temperature=o.t_max)
    for _ in range(200):  # never improving: the decay runs as far as it can
        state = decay_step(state, 0.1, patience=1, gamma=0.5, t_min=o.t_min)
    assert state.temperature >= MIN_TEMPERATURE


@pytest.mark.parametrize("override", [["temperature.policy=fixed", "temperature.value=1e-30"],
                                      ["temperature.policy=fedchill", "temperature.t_min=1e-30", "temperature.t_max=1e-29"],
                                      ["temperature.policy=fixed", "temperature.value=1e308"]])
def test_a_tiny_temperature_exits_2_with_one_line_before_anything_is_written(tmp_path: Path, capfd: pytest.CaptureFixture[str],
                                                                            override: list[str]) -> None:
    from chillfl.cli import main

    path = tmp_path / "t.toml"
    path.write_text(f'out_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n', encoding="utf-8")
    assert main(["run", str(path), "--quiet", "federation.num_clients=4", "federation.rounds=1", *override]) == 2
    err = capfd.readouterr().err
    field = override[1].split("=")[0]
    assert len(err.splitlines()) == 1 and f"{field}: must be a temperature in" in err, err
    assert not (tmp_path / "out").exists()


def test_an_unread_p_g_is_not_refused_with_init_false() -> None:
    """With init = false the run says p_g is ignored; it then refused a p_g of the wrong length, contradicting that."""
    import numpy as np

    from chillfl.temperature.fedchill import FedChillPolicy

    counts = np.ones((4, 10))
    policy = FedChillPolicy(FedChillOptions(init=False, p_g=[0.5, 0.5]), counts)
    assert policy.client_half(10).options.p_g == [0.5, 0.5]
    with pytest.raises(ConfigError, match=r"temperature\.p_g"):  # read with init = true: still checked
        FedChillPolicy(FedChillOptions(p_g=[0.5, 0.5]), counts)


def test_the_temperature_sweep_refuses_a_grid_point_below_the_floor() -> None:
    from chillfl.analysis.temperature_sweep import parse_temperatures

    with pytest.raises(ConfigError, match=r"--temperatures: must be a temperature in \[0\.0001, 10000\]") as info:
        parse_temperatures("1e-30,1")
    assert info.value.field == "--temperatures"
    assert parse_temperatures([MIN_TEMPERATURE, 1.0]) == [MIN_TEMPERATURE, 1.0]
    with pytest.raises(ConfigError, match=r"--temperatures: must be a temperature in"):
        parse_temperatures("1,1e308")


def test_a_constant_temperature_from_python_is_held_to_the_same_range() -> None:
    """``chillfl.run(policy=ConstantTemperature(1e308))`` ran every round at loss ln K; FedChillPolicy checked its options."""
    from chillfl.temperature.base import ConstantTemperature

    for value in (1e308, 1e-30):
        with pytest.raises(ConfigError, match=r"temperature\.value: must be a temperature in"):
            ConstantTemperature(value)
    assert ConstantTemperature(0.05).temperature(0, 0) == 0.05

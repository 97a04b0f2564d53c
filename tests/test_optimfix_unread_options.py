"""Options a run never reads, set away from their defaults, are said in one warning line, not refused: a grid over the
schedule (or over FedAdam and FedAdagrad) on a file that sets them runs, and a run that ignores them says so."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from chillfl.cli import main
from chillfl.config import load_config
from chillfl.experiment import build_experiment

TINY: dict[str, Any] = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 2, "federation.rounds": 1,
                        "temperature.policy": "none"}


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "not read by" in r.getMessage()]


@pytest.mark.parametrize(("over", "named"), [
    ({"client.lr_min": 0.001}, ["client.lr_min = 0.001"]),
    ({"client.lr_schedule_over": "steps", "client.lr_gamma": 0.5, "client.lr_step_size": 3},
     ["client.lr_schedule_over = 'steps'", "client.lr_step_size = 3", "client.lr_gamma = 0.5"]),
    ({"client.lr_schedule": "step", "client.lr_min": 0.001}, ["client.lr_min = 0.001"]),
    ({"client.lr_schedule": "cosine", "client.lr_gamma": 0.5, "client.lr_step_size": 2}, ["client.lr_step_size = 2", "client.lr_gamma = 0.5"]),
])
def test_an_option_the_schedule_never_reads_is_said_in_one_line(over: dict[str, Any], named: list[str], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "chillfl"):
        load_config(None, over)
    said = _said(caplog)
    assert len(said) == 1 and all(n in said[0] for n in named)


@pytest.mark.parametrize("over", [
    {},
    {"client.lr_min": 0.0, "client.lr_gamma": 0.1, "client.lr_step_size": 1, "client.lr_schedule_over": "rounds"},  # the defaults, spelt out
    {"client.lr_schedule": "cosine", "client.lr_min": 0.001, "client.lr_schedule_over": "steps"},
    {"client.lr_schedule": "step", "client.lr_gamma": 0.5, "client.lr_step_size": 2},
    {"algorithm.name": "fedadam", "algorithm.beta2": 0.9},
])
def test_what_is_read_or_left_at_its_default_says_nothing(over: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "chillfl"):
        build_experiment(load_config(None, {**TINY, **over}))
    assert _said(caplog) == []


@pytest.mark.parametrize("section", ["algorithm", "algorithm.base_options"])
def test_fedadagrad_says_it_reads_no_beta2(section: str, caplog: pytest.LogCaptureFixture) -> None:
    table = {"algorithm.name": "fedadagrad"} if section == "algorithm" else {"algorithm.name": "pa3fed", "algorithm.base": "fedadagrad"}
    with caplog.at_level(logging.WARNING, "chillfl"):
        build_experiment(load_config(None, {**TINY, **table, f"{section}.beta2": 0.9}))
    said = _said(caplog)
    assert len(said) == 1 and said[0].startswith(f"{section}.beta2 = 0.9 is not read by FedAdagrad")


def test_a_grid_over_the_schedule_and_the_server_optimiser_still_runs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'name = "unread"\nout_dir = "{tmp_path / "out"}"\n[client]\nlr = 0.05\nlr_min = 0.005\n'
                      '[algorithm]\nname = "fedadagrad"\nbeta2 = 0.9\n')
    args = [f"{k}={v}" for k, v in TINY.items()]
    with caplog.at_level(logging.WARNING, "chillfl"):
        code = main(["compare", str(config), "-q", *args, "--grid", "client.lr_schedule=constant,cosine", "--grid", "algorithm.name=fedadagrad,fedadam"])
    assert code == 0
    said = _said(caplog)
    assert any(s.startswith("client.lr_min = 0.005 is not read by client.lr_schedule = 'constant'") for s in said)
    assert any(s.startswith("algorithm.beta2 = 0.9 is not read by FedAdagrad") for s in said)
    assert (tmp_path / "out" / "unread-compare").is_dir()


@pytest.mark.parametrize(("over", "named"), [
    ({"temperature.init": False, "temperature.s": 3.0, "temperature.measure": "gini"},
     ["temperature.s = 3.0 and temperature.measure = 'gini' are not read with temperature.init = false"]),
    ({"temperature.t_start": 0.5}, ["temperature.t_start = 0.5 is not read with temperature.init = true"]),
    ({"temperature.decay": False, "temperature.gamma": 0.9, "temperature.patience": 4},
     ["temperature.patience = 4 and temperature.gamma = 0.9 are not read with temperature.decay = false"]),
])
def test_a_fedchill_option_its_switches_leave_unread_is_said(over: dict[str, Any], named: list[str], caplog: pytest.LogCaptureFixture) -> None:
    """FedChill's init = false read no s, measure, normalisation or p_g, init = true no t_start, decay = false no
    patience, gamma or compare: a setting that did nothing was accepted without a word."""
    with caplog.at_level(logging.WARNING, "chillfl"):
        build_experiment(load_config(None, {**TINY, "temperature.policy": "fedchill", **over}))
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "not read with" in r.getMessage()]
    assert [s.split(" (")[0] for s in said] == named


@pytest.mark.parametrize("over", [
    {"temperature.init": False, "temperature.t_start": 0.5, "temperature.gamma": 0.9},
    {"temperature.s": 3.0, "temperature.measure": "gini", "temperature.patience": 4},
    {"temperature.init": False, "temperature.s": 2.0, "temperature.decay": False, "temperature.compare": "previous"},  # defaults spelt out
])
def test_fedchill_options_read_or_at_their_defaults_say_nothing(over: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "chillfl"):
        build_experiment(load_config(None, {**TINY, "temperature.policy": "fedchill", **over}))
    assert [r.getMessage() for r in caplog.records if "not read" in r.getMessage()] == []


def test_an_option_whose_default_comes_from_a_factory_is_unread_only_away_from_it(caplog: pytest.LogCaptureFixture) -> None:
    """``warn_unread`` compared a ``default_factory`` field with MISSING: an empty list at its default was "not read"."""
    import dataclasses

    from chillfl.options import warn_unread

    @dataclasses.dataclass(frozen=True)
    class Options:
        xs: list[int] = dataclasses.field(default_factory=list)

    with caplog.at_level(logging.WARNING, "chillfl"):
        warn_unread(Options(), ("xs",), "sec", "by nothing")
        assert caplog.records == []
        warn_unread(Options(xs=[1]), ("xs",), "sec", "by nothing")
    assert [r.getMessage() for r in caplog.records] == ["sec.xs = [1] is not read by nothing: this run ignores it"]

"""A temperature policy's client half and its declared ``trains_at`` are checked when the run is built, each misfit one
line on the policy's field (``temperature.policy``, ``policy`` for one passed from Python) before anything is written.

The half's ``temperature(state, offered, labels)`` or ``finish(state, temperature, local_accuracy)`` with the wrong
parameters (or missing) was a TypeError/AttributeError traceback at the first client, after the folder was written; a
declared ``trains_at`` that the policy's first round does not train at made the step-size controls, caveats and
records read a T no client trained at."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import pytest
import torch
from torch import nn

import chillfl
from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.extend import Capabilities, ConstantTemperature, TemperatureState

CONFIG = {"federation": {"num_clients": 2, "rounds": 1}}


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(60, 8, generator=g), torch.randint(0, 3, (60,), generator=g)
    return chillfl.TensorData(x[:48], y[:48], x[48:], y[48:], num_classes=3)


class HalfNoLabels:
    def temperature(self, state: Mapping[str, torch.Tensor], offered: float) -> float:  # no `labels`
        return offered

    def finish(self, state: Mapping[str, torch.Tensor], temperature: float, local_accuracy: float | None) -> TemperatureState:
        return {}


class HalfNoAccuracy:
    def temperature(self, state: Mapping[str, torch.Tensor], offered: float, labels: torch.Tensor) -> float:
        return offered

    def finish(self, state: Mapping[str, torch.Tensor], temperature: float) -> TemperatureState:  # no `local_accuracy`
        return {}


class HalfNoFinish:
    def temperature(self, state: Mapping[str, torch.Tensor], offered: float, labels: torch.Tensor) -> float:
        return offered


class HalfGood:
    def temperature(self, state: Mapping[str, torch.Tensor], offered: float, labels: torch.Tensor, *extra: Any) -> float:
        return offered

    def finish(self, state: Mapping[str, torch.Tensor], temperature: float, local_accuracy: float | None, scale: float = 1.0) -> TemperatureState:
        return {}


def _policy(half: type) -> type:
    class WithHalf(ConstantTemperature):
        capabilities = Capabilities()  # sets T on the client: declares no one T

        def client_half(self, num_classes: int) -> Any:
            return half()

    WithHalf.__name__ = WithHalf.__qualname__ = f"Policy{half.__name__}"
    return WithHalf


PolicyHalfNoLabels = _policy(HalfNoLabels)
PolicyHalfNoAccuracy = _policy(HalfNoAccuracy)
PolicyHalfNoFinish = _policy(HalfNoFinish)
PolicyHalfGood = _policy(HalfGood)


class PerClient(ConstantTemperature):
    """Declares one T (its parent sets ``capabilities`` on the instance) but trains client 1 at another."""

    def __init__(self) -> None:
        super().__init__(0.5)
        self.capabilities = Capabilities(trains_at=0.5)

    def temperature(self, client_id: int, round: int) -> float:
        return 0.5 if client_id == 0 else 0.25


class ByPathPerClient(PerClient):
    capabilities = Capabilities(trains_at=0.5)


class HalfQuarter:
    def temperature(self, state: Mapping[str, torch.Tensor], offered: float, labels: torch.Tensor) -> float:
        return 0.25

    def finish(self, state: Mapping[str, torch.Tensor], temperature: float, local_accuracy: float | None) -> TemperatureState:
        return {}


class HalfSetsAnother(ConstantTemperature):
    """Declares T = 0.5 as the server's downlink offers, but its client half trains at 0.25."""

    capabilities = Capabilities(trains_at=0.5)

    def __init__(self) -> None:
        super().__init__(0.5)

    def client_half(self, num_classes: int) -> Any:
        return HalfQuarter()


def _run(tmp_path: Path, **parts: Any) -> Callable[[], Any]:
    return lambda: chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, out_dir=tmp_path, name="r", progress=False, **parts)


@pytest.mark.parametrize(("policy", "words"), [
    (PolicyHalfNoLabels, "HalfNoLabels.temperature(state, offered) cannot be called as temperature(state, offered, labels)"),
    (PolicyHalfNoAccuracy, "HalfNoAccuracy.finish(state, temperature) cannot be called as finish(state, temperature, local_accuracy)"),
    (PolicyHalfNoFinish, "PolicyHalfNoFinish's client half HalfNoFinish lacks finish"),
], ids=["temperature", "finish", "no-finish"])
def test_a_client_half_hook_of_the_wrong_arity_is_one_line_before_anything_is_written(tmp_path: Path, policy: type, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        _run(tmp_path, policy=policy())()
    assert err.value.field == "policy" and words in err.value.message, err.value
    assert list(tmp_path.iterdir()) == []  # no r.partial
    with pytest.raises(ConfigError) as named:  # the class named by import path: the config's field
        chillfl.run(model=nn.Linear(8, 3), data=_data(), config={**CONFIG, "temperature": {"policy": f"{__name__}:{policy.__name__}"}},
                    out_dir=tmp_path, name="r", progress=False)
    assert named.value.field == "temperature.policy" and words in named.value.message, named.value
    assert list(tmp_path.iterdir()) == []


def test_the_cli_says_a_wrong_client_half_in_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'[temperature]\npolicy = "{__name__}:PolicyHalfNoLabels"\n[federation]\nnum_clients = 2\nrounds = 1\n')
    assert main(["run", str(config), f"out_dir={tmp_path / 'out'}"]) == 2
    assert not (tmp_path / "out").exists()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("chillfl: error: temperature.policy: HalfNoLabels.temperature(state, offered) cannot"), lines


def test_a_client_half_with_optional_extras_runs() -> None:
    result = chillfl.run(model=nn.Linear(8, 3), data=_data(), config=CONFIG, policy=PolicyHalfGood(), write=False, progress=False)
    assert result is not None


@pytest.mark.parametrize(("parts", "field", "words"), [
    ({"policy": PerClient()}, "policy", "'PerClient' declares trains_at = 0.5 (the one T for every client and round, which the step-size controls, "
                                        "caveats and records read), but its temperature(1, 0) is 0.25 at round 0"),
    ({"config": {**CONFIG, "temperature": {"policy": f"{__name__}:ByPathPerClient"}}}, "temperature.policy",
     f"'{__name__}:ByPathPerClient' declares trains_at = 0.5"),
    ({"policy": HalfSetsAnother()}, "policy", "but its client half's temperature({}, 0.5, labels) for client 0 is 0.25 at round 0"),
], ids=["server-half", "by-path", "client-half"])
def test_a_declared_trains_at_the_first_round_does_not_train_at_is_refused(tmp_path: Path, parts: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        chillfl.run(**{"model": nn.Linear(8, 3), "data": _data(), "config": CONFIG, "out_dir": tmp_path, "name": "r", "progress": False, **parts})
    assert err.value.field == field and words in err.value.message, err.value
    assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_an_honest_declaration_runs() -> None:
    for config in ({"policy": "none"}, {"policy": "fixed", "value": 0.5}, {"policy": f"{__name__}:PolicyHalfGood"}):  # declared T, a half's
        assert chillfl.run(model=nn.Linear(8, 3), data=_data(), config={**CONFIG, "temperature": config}, write=False, progress=False) is not None

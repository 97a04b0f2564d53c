"""A temperature policy passed from Python as an instance is read for its declared ``trains_at`` as the same class named
by import path is (apiref F5): ``compare(policy=Honest(), controls=True)`` was refused ("no variant is trained at a fixed
T != 1") while ``temperature.policy = "module:Honest"`` got its "T=1, lr x 4" control."""

from __future__ import annotations

from typing import Any, Mapping

import pytest
import torch
from torch import nn

import chillfl
from chillfl.extend import Capabilities, TemperatureHalf


class Honest:
    """One T for every client, every round, declared (``trains_at``) as the bundled ``fixed`` declares it."""

    capabilities = Capabilities(trains_at=0.25)

    def temperature(self, client_id: int, round: int) -> float:
        return 0.25

    def observe(self, client_id: int, round: int, local_accuracy: float | None) -> None:
        return None

    def client_half(self, num_classes: int) -> TemperatureHalf | None:
        return None

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(48, 6, generator=g), torch.arange(48) % 3
    return chillfl.TensorData(x[:36], y[:36], x[36:], y[36:], num_classes=3)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(6, 3)


CONFIG = {"federation": {"num_clients": 2, "clients_per_round": 2, "rounds": 1}, "client": {"lr": 0.1, "batch_size": 8}}


def _compare(**how: Any) -> chillfl.Comparison:
    return chillfl.compare(model=_model(), data=_data(), controls=True, seeds=[0], write=False, progress=False, **how)


def test_an_instance_policy_gets_the_controls_of_its_declared_t_as_by_import_path() -> None:
    by_instance = _compare(config=CONFIG, policy=Honest())
    assert not by_instance.failures, by_instance.failures
    runs = {label: out.records[-1] for label, out in by_instance.outputs.items()}
    control = "T=1, lr x 4 (control of run)"
    assert sorted(runs) == sorted(["run", control, "run magnitude only", "run direction only"])
    # the T=1 control trains without the policy, at T = 1 and lr 0.1 / 0.25; the policy's run and its ablations at its T
    assert (runs[control]["temperature_mean"], runs[control]["lr"]) == (1.0, pytest.approx(0.4))
    assert [(runs[k]["temperature_mean"], runs[k]["lr"]) for k in ("run", "run magnitude only", "run direction only")] == [(0.25, 0.1)] * 3
    # the same class named by import path: the same variants, trained alike
    by_path = _compare(config={**CONFIG, "temperature": {"policy": f"{__name__}:Honest"}})
    assert by_path.table.splitlines()[1:] == by_instance.table.splitlines()[1:]

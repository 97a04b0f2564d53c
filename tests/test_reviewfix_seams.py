"""Review of the day's seams: a ConstantTemperature subclass keeps its own declared capabilities; a bf16 row release
is judged at its dtype's precision; an unequal or mis-sized weighting of a rule that takes no weights is one ConfigError."""

from __future__ import annotations

import pytest
import torch

from chillfl.capabilities import Capabilities
from chillfl.errors import ConfigError
from chillfl.extend import ConstantTemperature
from chillfl.privacy.build import EqualWeights
from chillfl.privacy.softlabels import row_problem
from chillfl.temperature.registry import built_policy_capabilities


class Ramp(ConstantTemperature):
    """T grows each round: it declares no single T, and that it steers by accuracy."""

    capabilities = Capabilities(steers_by_accuracy=True)

    def temperature(self, client_id: int, round: int) -> float:
        return self.value * (1 + round)


def test_a_constant_temperature_subclass_keeps_its_own_capabilities() -> None:
    """The instance's one-T declaration hid a subclass's class-level one (a T that varies read as one T = value)."""
    ramp = built_policy_capabilities({"policy": "custom"}, Ramp(2.0))
    assert ramp.trains_at is None and ramp.steers_by_accuracy is True
    assert built_policy_capabilities({"policy": "custom"}, ConstantTemperature(0.5)).trains_at == 0.5


def test_a_bf16_probability_row_is_judged_at_bf16_precision() -> None:
    """Rows renormalised in float64 then rounded to bf16 are ~3e-3 off 1 at 10 classes: as close as bf16 can be."""
    rows = torch.full((4, 10), 0.1)
    rows[:, 0] = 0.1 + 3e-3  # a sum 1.003: within 10 x bf16's epsilon (0.078), past the 1e-3 of float32 rows
    assert row_problem(rows.to(torch.bfloat16), rows.to(torch.bfloat16), True) is None
    assert row_problem(rows, rows, True) is not None  # float32: 1e-3
    assert row_problem((rows * 2).to(torch.bfloat16), rows.to(torch.bfloat16), True) is not None  # not projected at all


class _Mean:
    def aggregate(self, global_params: dict[str, torch.Tensor], results: list[object], round: int) -> dict[str, torch.Tensor]:
        return global_params


@pytest.mark.parametrize("weights", [[0.3, 0.7], [0.5], torch.tensor([0.25, 0.25, 0.5])])
def test_unequal_or_mis_sized_weights_of_an_unweighted_rule_are_one_config_error(weights: object) -> None:
    """A list printed an AttributeError ('list' has no tolist); one weight for two clients broadcast and passed."""
    with pytest.raises(ConfigError, match="weighs the clients unequally"):
        EqualWeights(_Mean()).aggregate({}, [object(), object()], 1, weights=weights)  # type: ignore[arg-type]
    assert EqualWeights(_Mean()).aggregate({}, [object(), object()], 1, weights=torch.tensor([0.5, 0.5])) == {}  # type: ignore[arg-type]

"""The soft-label protocol refuses every [objective] term for the reason that holds for each: clients train on the base loss only."""

from __future__ import annotations

import pytest

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from test_objective_terms import BASE as TERMS_BASE

BASE = {**TERMS_BASE, "distillation.method": "dsfl", "distillation.public_size": 100, "distillation.subset_size": 20}


@pytest.mark.parametrize(
    ("over", "field", "tail"),
    [
        ({"objective.terms": [{"name": "decorr"}]}, "objective.terms[0]", "leave it empty"),  # a batch term: reads no global model
        ({"objective.terms": ["proximal"]}, "objective.terms[0]", "leave it empty"),
        ({"objective.proximal_mu": 0.1}, "objective.proximal_mu", "leave it 0"),
    ],
)
def test_soft_label_refusal_gives_the_reason_for_any_term(over: dict, field: str, tail: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(load_config(None, {**BASE, **over}))
    assert info.value.field == field
    message = str(info.value)
    assert "trains clients with the base loss only: no objective terms" in message  # as the algorithm.name refusal says
    assert "global model" not in message  # decorr needs none: that was not why it is refused
    assert message.endswith(tail)


def test_prototype_refusal_keeps_its_wording() -> None:
    over = {k: v for k, v in BASE.items() if not k.startswith("distillation.")}
    with pytest.raises(ConfigError) as info:
        build_experiment(load_config(None, {**over, "prototypes.method": "fedproto", "objective.proximal_mu": 0.1}))
    assert info.value.field == "objective.proximal_mu"
    assert str(info.value).endswith("the prototype-sharing protocol ([prototypes]) trains with its own objective; leave it 0")

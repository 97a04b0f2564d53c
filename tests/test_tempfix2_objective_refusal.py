"""A soft-label run's refusal of an [objective] term names the term it refuses, not only the field."""

from __future__ import annotations

import pytest

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment
from test_pafix_objective_refusal import BASE


@pytest.mark.parametrize(
    ("over", "field", "name"),
    [
        ({"objective.terms": ["decorr"]}, "objective.terms[0]", "decorr"),
        ({"objective.terms": [{"name": "ntd", "beta": 2.0}]}, "objective.terms[0]", "ntd"),
        ({"objective.terms": ["decorr", "ntd"]}, "objective.terms[0]", "decorr"),  # the first, as its field says
        ({"objective.proximal_mu": 0.1}, "objective.proximal_mu", "proximal"),
    ],
)
def test_soft_label_refusal_names_the_term(over: dict, field: str, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        build_experiment(load_config(None, {**BASE, **over}))
    assert info.value.field == field
    message = str(info.value)
    assert f"{field}: {name!r} is not added: the soft-label protocol trains clients with the base loss only" in message
    if name != "proximal":  # not the proximal term's wording for another term
        assert "proximal" not in message and "global model" not in message

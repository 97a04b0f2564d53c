"""rev100a #4: an aggregator built in Python that sizes its state by the federation, or needs the run's model.

PACFL, CFL, FeSEM and pFedHN sized their state by their own ``num_clients`` (an IndexError in round 0 of a larger run);
``FedFomo(3, keys)`` evaluated on ``nn.Identity`` (an AttributeError). The run's value is now taken or a misfit refused.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from test_pyagg_bind import model, refusal, same, state

FIVE = {"federation.num_clients": 5}
"""A 5-client run (the instances below are built for 3)."""


def _keys() -> list[str]:
    return [k for k, _ in model().named_parameters()]


def _pacfl(n: int) -> Any:
    from chillfl.aggregation.pacfl import Pacfl

    return Pacfl(n)


def _cfl(n: int) -> Any:
    from chillfl.aggregation.cfl import Cfl

    return Cfl(n, _keys())


def _fesem(n: int) -> Any:
    from chillfl.aggregation.fesem import Fesem

    return Fesem(n, _keys(), model(), 3)


def _pfedhn(n: int) -> Any:
    from chillfl.aggregation.pfedhn import PFedHN, PFedHNOptions

    return PFedHN(PFedHNOptions(), n, {k: v.shape for k, v in model().named_parameters()}, 3, torch.float64)


SIZED: list[tuple[str, Callable[[int], Any]]] = [("pacfl", _pacfl), ("cfl", _cfl), ("fesem", _fesem), ("pfedhn", _pfedhn)]


@pytest.mark.parametrize(("name", "make"), SIZED, ids=[s[0] for s in SIZED])
def test_num_clients_other_than_the_runs_is_refused(name: str, make: Callable[[int], Any]) -> None:
    """#4: ``Pacfl(3)`` in a 5-client run failed in round 0 (IndexError: index 3 is out of bounds); the run's count runs
    bitwise as the config's method."""
    err = refusal(lambda: make(3), FIVE)
    assert err.field == "aggregator.num_clients" and "federation.num_clients = 5" in err.message and "pass num_clients=5" in err.message
    assert same(state({"name": "fedavg"}, aggregator=make(3)), state({"name": name}))


def test_fedfomo_without_a_model_takes_the_runs() -> None:
    """#4: ``FedFomo(3, keys)`` (model left None) evaluated on ``nn.Identity`` and failed in round 0; it takes the run's
    model, as the config's method."""
    from chillfl.aggregation.fedfomo import FedFomo

    assert same(state({"name": "fedavg"}, aggregator=FedFomo(3, _keys(), seed=3)), state({"name": "fedfomo"}))

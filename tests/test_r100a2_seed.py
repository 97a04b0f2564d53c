"""rev100a #5: APPLE, FedALA, FML, FedCP, FedFomo and CCVR built in Python drew with seed 0 whatever the run's seed, so
an instance did not run bitwise as the config's method (docs/python-api.md says it does) and every seed of ``compare``
drew alike. Built without a seed they take the run's; a seed given that is not the run's is refused on ``aggregator.seed``.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
from test_pyagg_bind import model, same, state

from chillfl.errors import ConfigError


def _keys() -> list[str]:
    return [k for k, _ in model().named_parameters()]


def _apple() -> tuple[Any, dict[str, Any]]:
    from chillfl.aggregation.apple import APPLE, APPLEOptions

    return APPLE(3, model(), APPLEOptions(selection="uniform", downloads=1)), {"name": "apple", "selection": "uniform", "downloads": 1}


def _fedala() -> tuple[Any, dict[str, Any]]:
    from chillfl.aggregation.fedala import FedALA

    return FedALA(model()), {"name": "fedala"}


def _fml() -> tuple[Any, dict[str, Any]]:
    from chillfl.aggregation.fml import FML, FMLOptions

    return FML(model(), FMLOptions(local_init="independent")), {"name": "fml", "local_init": "independent"}


def _fedcp() -> tuple[Any, dict[str, Any]]:
    from chillfl.aggregation.fedcp import FedCP

    return FedCP(model()), {"name": "fedcp"}


def _fedfomo() -> tuple[Any, dict[str, Any]]:
    from chillfl.aggregation.fedfomo import FedFomo

    return FedFomo(3, _keys(), model=model()), {"name": "fedfomo"}


def _ccvr() -> tuple[Any, dict[str, Any]]:
    from chillfl.aggregation.ccvr import CCVR

    return CCVR(model()), {"name": "ccvr"}


SEEDED: list[tuple[str, Callable[[], tuple[Any, dict[str, Any]]]]] = [
    ("apple", _apple), ("fedala", _fedala), ("fml", _fml), ("fedcp", _fedcp), ("fedfomo", _fedfomo), ("ccvr", _ccvr)]


@pytest.mark.parametrize(("name", "make"), SEEDED, ids=[s[0] for s in SEEDED])
def test_default_seed_is_the_runs(name: str, make: Callable[[], tuple[Any, dict[str, Any]]]) -> None:
    """#5: built without a seed, the instance drew with seed 0 in a seed-3 run; it now runs bitwise as the config's
    method (docs/python-api.md), and a seed given that is not the run's is refused on ``aggregator.seed``."""
    aggregator, table = make()
    assert same(state({"name": "fedavg"}, aggregator=aggregator), state(table))
    aggregator.seed = 0  # as FedX(..., seed=0) sets it
    with pytest.raises(ConfigError) as err:
        state({"name": "fedavg"}, aggregator=aggregator)
    assert err.value.field == "aggregator.seed" and "seed = 3" in err.value.message and "got 0" in err.value.message


def test_the_runs_seed_given_is_accepted() -> None:
    """A seed given that equals the run's is no misfit (``CCVR(model, seed=3)`` in a seed-3 run, as before)."""
    from chillfl.aggregation.fedcp import FedCP

    assert same(state({"name": "fedavg"}, aggregator=FedCP(model(), seed=3)), state({"name": "fedcp"}))

"""A baseline whose server maths assumes something of the clients' steps ran silently when it did not hold.

q-FFL's L = 1/lr reads the client's displacement as plain SGD steps; with momentum 0.9 or Adam its server step
collapsed to chance accuracy. (FedNova under a proximal term, refused here before, is normalised now:
tests/test_fednova_proximal.py.)
"""

from __future__ import annotations

from typing import Any

import pytest

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import check_config

BASE: dict[str, Any] = {"dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.clients_per_round": 2}


def _check(**over: Any) -> None:
    check_config(load_config(None, {**BASE, **over}))


@pytest.mark.parametrize(("over", "field"), [
    ({"client.momentum": 0.9}, "client.momentum"),
    ({"client.optimizer": "adam", "client.lr": 0.001}, "client.optimizer"),
])
def test_qffl_with_its_lr_estimate_refuses_a_client_optimiser_other_than_plain_sgd(over: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        _check(**{"algorithm.name": "qffl"}, **over)
    assert err.value.field == field and "L = 1/lr" in err.value.message and "algorithm.lipschitz" in err.value.message
    _check(**{"algorithm.name": "qffl", "algorithm.lipschitz": 10.0}, **over)  # L fixed: the estimate is not read
    _check(**{"algorithm.name": "qffl"})  # plain SGD: fine

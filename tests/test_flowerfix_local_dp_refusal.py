"""``local`` (client noise, ``MechanismSpec.any_rule``) takes any rule over one shared model (median, Krum, ...), so its
refusal of a method whose server step is no such rule (FedDyn, local_only, FedAMP, pFedSim) names that reason. It said
the method "is not" the server's weighted mean and "declares no takes_weights", which is true of median too, which
``local`` runs; ``dp-fedavg``, which needs the weighted mean, keeps that wording."""

from __future__ import annotations

import pytest

from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment

TINY = {"seed": 1, "threads": 1, "dataset.name": "digits", "model.name": "mlp", "federation.num_clients": 4, "federation.rounds": 1}
PRIVATE = {"privacy.clip_norm": 1.0, "privacy.noise_multiplier": 1.0, "privacy.delta": 1e-3}


def _refusal(algorithm: str, mechanism: str) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        build_experiment(load_config(None, {**TINY, **PRIVATE, "algorithm.name": algorithm, "privacy.mechanism": mechanism}))
    assert err.value.field == "privacy.mechanism" and "\n" not in err.value.message
    return err.value


@pytest.mark.parametrize(("algorithm", "why"), [
    ("feddyn", "FedDyn's server step is its own"),
    ("local_only", "each client has a model of its own"),
    ("fedamp", "FedAMP's server sends each client its own cloud model"),
    ("pfedsim", "pFedSim's server sends each client its own extractor"),
])
def test_local_refuses_a_server_step_that_is_no_rule_over_the_updates_for_that_reason(algorithm: str, why: str) -> None:
    message = _refusal(algorithm, "local").message
    assert f"which the server step of algorithm {algorithm!r} is not ({why}" in message
    assert "takes_weights" not in message and "weighted mean of the models" not in message  # median takes no weights, and local runs it
    assert "use an algorithm whose server keeps one shared model (FedAvg, median, Krum, ...), or a mechanism that leaves the aggregate alone: dp-sgd" in message


def test_dp_fedavg_still_names_the_weighted_mean() -> None:
    message = _refusal("median", "dp-fedavg").message
    assert "server's weighted mean of the models, which algorithm 'median' is not (it declares no takes_weights" in message
    assert message.endswith("use an algorithm whose server takes a weighted mean of the models, or a mechanism that leaves the aggregate alone: dp-sgd")

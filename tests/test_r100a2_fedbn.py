"""rev100a #7: ``FedBN(["head.weight", "head.bias"])`` on a model without batch norm was refused for the model's lack of
batch norm, though the instance keeps the keys it was given (a personal head)."""

from __future__ import annotations

import pytest
from test_pyagg_bind import same, state

from chillfl.errors import ConfigError


def test_fedbn_instance_keeps_the_keys_it_was_given() -> None:
    """#7: ``FedBN(["head.weight", "head.bias"])`` ran as a personal head before 48b14921 and was then refused because the
    model has no batch norm; the config's method on that model is still refused (its keys are the batch norm's)."""
    from chillfl.aggregation.fedbn import FedBN

    personal_head = state({"name": "fedavg"}, aggregator=FedBN(["head.weight", "head.bias"]))
    assert not same(personal_head, state({"name": "fedavg"}))
    with pytest.raises(ConfigError) as err:
        state({"name": "fedbn"})
    assert err.value.field == "model" and "batch-norm" in err.value.message
    with pytest.raises(ConfigError) as err:
        state({"name": "fedavg"}, aggregator=FedBN(["head.scale", "bn.weight"]))
    assert err.value.field == "aggregator.bn_keys" and "'bn.weight'" in err.value.message and "plain FedAvg" in err.value.message


def test_fedbn_instance_refuses_a_key_the_state_lacks() -> None:
    """rev101: ``FedBN(["head.weight", "head.bais"])`` ran as ``FedBN(["head.weight"])``, the misspelt bias left global."""
    from chillfl.aggregation.fedbn import FedBN

    with pytest.raises(ConfigError) as err:
        state({"name": "fedavg"}, aggregator=FedBN(["head.weight", "head.bais"]))
    assert err.value.field == "aggregator.bn_keys" and "'head.bais'" in err.value.message and "'head.weight'" not in err.value.message

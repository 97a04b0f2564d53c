"""The one-sample-batch refusal's advice names options the run's partitioner takes: ``partition.min_size`` only where
it has one (shards and iid refuse min_size as an unknown option, so the old advice led to a second refusal)."""

from __future__ import annotations

import pytest

from chillfl.config import config_from_dict
from chillfl.errors import ConfigError
from chillfl.experiment import build_experiment, larger_clients_hint

BASE = {"dataset": {"name": "digits"}, "model": {"name": "fedchill_cnn3"}, "federation": {"num_clients": 3, "rounds": 1}}


def test_shards_are_told_their_own_options_not_min_size() -> None:
    shards = {"name": "shards", "shard_size": 1, "shards_per_client": 1}
    with pytest.raises(ConfigError, match="a single training sample") as info:
        build_experiment(config_from_dict({**BASE, "partition": shards}))
    assert info.value.field == "partition" and "min_size" not in info.value.message
    assert info.value.message.endswith("change shards's options (shard_size, shards_per_client) or partition.name so each client holds more samples")


@pytest.mark.parametrize(("partition", "hint"), [
    ({"name": "dirichlet", "alpha": 0.5}, "raise partition.min_size or split otherwise"),
    ({"name": "quantity_skew"}, "raise partition.min_size or split otherwise"),
    ({"name": "iid"}, "iid takes no options: choose another partition.name"),
    ({"from": "partition.json"}, "give each client more samples in partition.from or split otherwise"),  # not read here
])
def test_min_size_is_advised_only_where_the_partitioner_has_it(partition: dict[str, object], hint: str) -> None:
    assert larger_clients_hint(config_from_dict({**BASE, "partition": partition})) == hint

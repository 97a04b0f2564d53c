"""The Flower refusal of a method measured after the server's average says the way out on Flower too (set the option to
a value measured on the node), as it did before it moved to the declared capabilities (after_average)."""

from __future__ import annotations

import pytest

from chillfl.config import config_from_dict
from chillfl.errors import ConfigError
from chillfl.flower.apps import check_supported


@pytest.mark.parametrize("name", ["fedper", "lg_fedavg"])
def test_the_refusal_names_the_option_to_change(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_supported(config_from_dict({"algorithm": {"name": name, "local_eval": "averaged"}}))
    assert err.value.field == "algorithm.local_eval" and "set local_eval to a value that measures on the node" in err.value.message


def test_the_prototype_refusal_names_chillfls_own_runtime() -> None:
    """Every other Flower refusal names where the config runs (flower.md says each does); [prototypes]' said only
    "chillfl's own runtime"."""
    with pytest.raises(ConfigError) as err:
        check_supported(config_from_dict({"prototypes": {"method": "fedproto"}}))
    assert err.value.field == "prototypes"
    assert err.value.message.endswith("not a [prototypes] method; run it with chillfl's own runtime (chillfl run; executor = \"ray\" for a cluster)")

"""``make_config(None, {"client": {1: 2}})`` said ``client.1: unknown option``: the table's key was joined into a dotted key
(:func:`chillfl.config.dotted_overrides`), where the key itself is what is wrong; now one line naming the table.
"""

from __future__ import annotations

from typing import Any

import pytest

import chillfl
from chillfl.errors import ConfigError


@pytest.mark.parametrize(("overrides", "got"), [({"client": {1: 2}}, "got 1 (int)"), ({"federation": {"rounds": 1, (1, 2): 3}}, "got (1, 2) (tuple)")])
def test_an_override_table_with_a_key_that_is_not_a_string_names_the_table(overrides: dict[str, Any], got: str) -> None:
    with pytest.raises(ConfigError) as info:
        chillfl.make_config(None, overrides)
    err = info.value
    assert err.field == next(iter(overrides)), str(err)
    assert err.message == f"a key must be a string (an option name, e.g. 'lr'), {got}", str(err)


def test_run_names_the_table_of_a_keyword_override_with_a_key_that_is_not_a_string() -> None:
    with pytest.raises(ConfigError, match=r"^client: a key must be a string"):
        chillfl.run(client={1: 2}, progress=False, write=False)


def test_an_override_table_with_string_keys_still_merges_key_by_key() -> None:
    config = chillfl.make_config(None, {"client": {"lr": 0.5}, "federation": {"rounds": 3}})
    assert config.client.lr == 0.5 and config.federation.rounds == 3

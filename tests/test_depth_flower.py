"""A Flower record that is damaged or hostile (its JSON nested past ``MAX_JSON_DEPTH``) is refused as any other damaged
JSON is, a ValueError, whatever Python's recursion limit: a message's tree (``flower/wire.py``) and a node's client
state key lists (``flower/state.py``) were read with plain ``json.loads``, a RecursionError or, under a raised limit,
a tree decoded as it came."""

from __future__ import annotations

from collections.abc import Iterator
import sys

import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, RecordDict  # noqa: E402

from chillfl.errors import MAX_JSON_DEPTH  # noqa: E402
from chillfl.flower.state import load_client_state, save_client_state  # noqa: E402
from chillfl.flower.wire import decode, encode  # noqa: E402


def _deep_list(depth: int) -> str:
    """``encode``'s spelling of a list in a list ... ``depth`` JSON levels deep."""
    return '{"l":[' * (depth // 2) + "1" + "]}" * (depth // 2)


@pytest.fixture(params=[1000, 100_000], ids=["default-limit", "raised-limit"])
def limit(request: pytest.FixtureRequest) -> Iterator[None]:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(request.param)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


@pytest.mark.usefixtures("limit")
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 2, 3000])
def test_a_message_tree_nested_too_deeply_is_refused(depth: int) -> None:
    content = encode([torch.ones(1)])
    content["meta"] = ConfigRecord({"tree": _deep_list(depth)})
    with pytest.raises(ValueError, match="nested too deeply"):
        decode(content)


def test_a_message_within_the_bound_decodes() -> None:
    content = encode([torch.ones(1)])
    content["meta"] = ConfigRecord({"tree": _deep_list(MAX_JSON_DEPTH)})
    node = decode(content)
    for _ in range(MAX_JSON_DEPTH // 2 - 1):
        node = node[0]
    assert node == [1]


@pytest.mark.usefixtures("limit")
@pytest.mark.parametrize("field", ["keys", "model_keys", "method_keys", "own_keys"])
def test_a_client_state_record_nested_too_deeply_is_refused(field: str) -> None:
    records = RecordDict()
    if field == "keys":
        save_client_state(records, 3, {"scaffold.c": torch.zeros(2)})
    else:
        records["chillfl.client.3"] = encode([]).array_records["arrays"]
        records["chillfl.client.3.meta"] = ConfigRecord({"model_keys": "[]", "cache_synced": -2})
    meta = records.config_records["chillfl.client.3.meta"]
    meta[field] = "[" * 3000 + "]" * 3000
    with pytest.raises(ValueError, match="nested too deeply"):
        load_client_state(records, 3)

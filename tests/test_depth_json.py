"""JSON nested deeper than ``MAX_JSON_DEPTH`` is a damaged file whatever Python's recursion limit: the refusal is a
count made before parsing, not Python's stack running out (a test or package that raises the limit changed what was
refused, and under a high one a deep enough file could crash the process)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import safetensors.torch
import torch

from chillfl.errors import MAX_JSON_DEPTH, json_depth, json_loads
from chillfl.storage import checkpoint

from test_damaged_files import cut  # noqa: F401  (the fixture)
from test_fsfix2_checkpoint import _check_damaged


@pytest.fixture
def high_limit() -> Iterator[None]:
    """Python's recursion limit raised far past any depth used here (restored after)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(100_000)
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def _nested(depth: int) -> str:
    return '{"a":' * (depth - 1) + "[1]" + "}" * (depth - 1)


@pytest.mark.usefixtures("high_limit")
@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 3000])
def test_json_deeper_than_the_bound_is_refused_under_a_raised_recursion_limit(depth: int) -> None:
    with pytest.raises(ValueError, match=f"nested too deeply: more than {MAX_JSON_DEPTH} levels"):
        json_loads(_nested(depth))
    with pytest.raises(ValueError, match="nested too deeply"):
        json_loads(_nested(depth).encode("utf-16"))  # bytes as json.loads reads them


def test_json_at_the_bound_loads() -> None:
    text = _nested(MAX_JSON_DEPTH)
    assert json_depth(text) == MAX_JSON_DEPTH
    assert json_loads(text) == json.loads(text)
    assert json_loads(text.encode("utf-8")) == json.loads(text)


@pytest.mark.parametrize("text, depth", [
    ("1", 0), ('"[[["', 0), ("[]", 1), ('{"a":[{}]}', 3),
    ('["\\\\", [1]]', 2),  # an escaped backslash ends no string early
    ('["\\"[[[", {"k[{": "]\\\\"}]', 2),  # an escaped quote ends no string
    ('{"\\u005b":"\u00e9[\ud83d\ude00"}', 1),  # non-ASCII and escapes inside strings
])
def test_brackets_inside_strings_are_not_counted(text: str, depth: int) -> None:
    assert json_depth(text) == depth
    deep_string = json.dumps({"x": "[" * 5000 + '\\"{' * 5000})
    assert json_loads(deep_string) == json.loads(deep_string)


def _signed(tree: str) -> bytes:
    """A well-formed, correctly signed checkpoint whose state skeleton is ``tree`` (JSON spelled by hand)."""
    text = f'{{"version":{checkpoint.FORMAT_VERSION},"tree":{{"round":1,"x":{tree}}},"run":{{}}}}'
    signed = text[:-1] + f',"{checkpoint.DIGEST_KEY}":"{checkpoint._digest(text, {})}"}}'
    return safetensors.torch.save({}, metadata={checkpoint.METADATA_KEY: signed})


@pytest.mark.usefixtures("high_limit")
def test_a_checkpoint_skeleton_past_the_bound_is_refused_under_a_raised_recursion_limit() -> None:
    # the document is 2 deep at "x": MAX_JSON_DEPTH - 2 more levels fit, one more does not
    fits = '{"a":' * (MAX_JSON_DEPTH - 3) + "{}" + "}" * (MAX_JSON_DEPTH - 3)
    tree, _ = checkpoint.decode_checkpoint(_signed(fits))
    assert tree["round"] == 1
    for depth in (MAX_JSON_DEPTH - 1, 5000):
        with pytest.raises(ValueError, match="nested too deeply"):
            checkpoint.decode_checkpoint(_signed('{"a":' * depth + "{}" + "}" * depth))


@pytest.mark.usefixtures("high_limit")
def test_status_and_resume_of_a_deep_checkpoint_under_a_raised_recursion_limit(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    _check_damaged(cut, _signed('{"a":' * 950 + "{}" + "}" * 950), capsys)


def _chain(depth: int, leaf: object) -> dict[str, object]:
    node: dict[str, object] = {"leaf": leaf}
    for _ in range(depth - 1):
        node = {"a": node}
    return node


def test_a_checkpoint_chillfl_writes_it_can_read_back(tmp_path: Path) -> None:
    """The deepest state a checkpoint holds reads back; one level more is refused on write, naming where."""
    path = tmp_path / "c.safetensors"
    deepest = MAX_JSON_DEPTH - 3  # the document and its tree are 2 levels, the tensor's mark 1
    checkpoint.write_state(path, {"x": _chain(deepest, torch.ones(2))})
    node = checkpoint.read_state(path)["x"]
    for _ in range(deepest - 1):
        node = node["a"]
    assert torch.equal(node["leaf"], torch.ones(2))
    for leaf in (torch.ones(2), float("nan"), [], {}):
        with pytest.raises(checkpoint.UnstorableState, match="nested too deeply") as info:
            checkpoint.encode_state({"x": _chain(deepest + 1, leaf)})
        assert info.value.where == "x" + ".a" * deepest + ".leaf"
    checkpoint.encode_state({"x": _chain(deepest + 1, 1.5)})  # a plain value is no level of its own

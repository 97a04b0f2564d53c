"""A checkpoint whose JSON header or state skeleton is nested too deeply: a damaged file (status row, resume's one-line
CorruptCheckpoint), not a RecursionError traceback (fsfault finding 1)."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Callable

import pytest
import safetensors.torch

from chillfl.cli import main
from chillfl.runner import CHECKPOINT
from chillfl.storage import checkpoint

from received_folder import DEEP
from test_damaged_files import _one_line_error, cut  # noqa: F401  (the fixture)


def _header(metadata: str, extra: str = "") -> bytes:
    text = ('{"__metadata__":{"chillfl":' + json.dumps(metadata) + "}" + extra + "}").encode()
    return struct.pack("<Q", len(text)) + text


def _deep_skeleton(depth: int = 950) -> bytes:
    """A well-formed, correctly signed checkpoint (anyone can sign one) whose state is ``depth`` dicts deep; the JSON
    is spelled by hand, since ``json.dumps`` of it may itself run out of stack."""
    tree = '{"a":' * depth + "{}" + "}" * depth
    text = f'{{"version":{checkpoint.FORMAT_VERSION},"tree":{{"round":1,"x":{tree}}},"run":{{}}}}'
    signed = text[:-1] + f',"{checkpoint.DIGEST_KEY}":"{checkpoint._digest(text, {})}"}}'
    return safetensors.torch.save({}, metadata={checkpoint.METADATA_KEY: signed})


@pytest.mark.parametrize("make", [lambda: _header("x", ',"z":' + DEEP), lambda: _header(DEEP), _deep_skeleton], ids=["header", "metadata", "skeleton"])
def test_a_deeply_nested_checkpoint_is_a_damaged_file(cut: Path, make: Callable[[], bytes], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    # Python's default recursion limit, whatever an earlier test in this worker set it to: under a raised one the
    # 950-deep skeleton parsed and decoded, and nothing was refused (it failed in CI, depending on test order)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        _check_damaged(cut, make(), capsys)
    finally:
        sys.setrecursionlimit(limit)


def _check_damaged(folder: Path, data: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    (folder / CHECKPOINT).write_bytes(data)
    assert main(["status", str(folder)]) == 0
    assert "| cut | stopped" in capsys.readouterr().out
    assert main(["resume", str(folder)]) == 2
    _one_line_error(capsys, "checkpoint", str(folder / CHECKPOINT))
    with pytest.raises(ValueError):
        checkpoint.decode_checkpoint(data)

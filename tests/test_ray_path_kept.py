"""``ray.init`` connecting to a local Ray another run left put a folder on the driver's ``sys.path`` (CI's private
network suite: tests/private_net/test_statefix_ray.py): :func:`path_kept` takes away what its block added, duplicates
of entries already there included, and leaves the rest."""

from __future__ import annotations

import sys

import pytest

from chillfl.executors.ray_executor import path_kept


def test_what_the_block_added_goes_and_the_rest_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["/a", "/b", "/c"])
    with path_kept():
        sys.path.insert(0, "/ray/added")
        sys.path.insert(1, "/a")  # a duplicate of an entry already there
        sys.path.remove("/c")  # the block's own removal is not undone
    assert sys.path == ["/a", "/b"]

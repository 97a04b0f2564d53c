"""``undo_import`` gives the caller's ``sys.path`` back also where Ray's ``thirdparty_files`` was on it already (from a
``PYTHONPATH`` a Flower simulation left, as in CI's private-network suite): ``import ray`` inserts it again at 0, and
that duplicate goes too."""

from __future__ import annotations

import sys

import pytest

from chillfl.executors.ray_executor import undo_import


def test_ray_insert_of_an_entry_already_on_the_path_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["/script", "/ray/thirdparty_files", "/site"])
    monkeypatch.delenv("RAY_CLIENT_MODE", raising=False)
    path = list(sys.path)
    sys.path.insert(0, "/ray/thirdparty_files")  # what `import ray` does
    undo_import(sys.excepthook, path, None)
    assert sys.path == ["/script", "/ray/thirdparty_files", "/site"]


def test_a_new_entry_goes_and_the_rest_keeps_its_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", ["/script", "/site"])
    monkeypatch.delenv("RAY_CLIENT_MODE", raising=False)
    path = list(sys.path)
    sys.path.insert(0, "/ray/thirdparty_files")
    undo_import(sys.excepthook, path, None)
    assert sys.path == ["/script", "/site"]

"""A user's plugin module written by a test: importable while a block runs, forgotten afterwards."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest


@contextmanager
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Iterator[None]:
    """``source`` importable as module ``name`` while the block runs (forgotten afterwards, so the next test's is read)."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield
    finally:
        sys.modules.pop(name, None)

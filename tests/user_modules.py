"""A user's plugin module for a test: written under ``tmp_path`` and importable (worker processes too), as an installed one would be."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from chillfl import runner


def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> Path:
    """``source`` as module ``name`` on ``sys.path`` (imported afresh by the test), and no figures drawn; returns its folder."""
    folder = tmp_path / "user"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    return folder

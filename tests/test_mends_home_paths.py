"""A run's ``out_dir`` / ``data_dir`` and the command line's ``--out`` read ``~`` with one function (paths.home_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl import config as config_module
from chillfl import paths
from chillfl.config import load_config


def test_the_config_reads_its_paths_with_the_clis_home_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RunConfig called os.path.expanduser itself while the CLI called home_path: one reading now, so they cannot drift."""
    assert config_module.home_path is paths.home_path
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for typed in ("~/results", "~", "./~/r", "plain"):
        config = load_config(None, {"out_dir": typed, "data_dir": typed})
        assert config.out_dir == config.data_dir == paths.home_path(typed)

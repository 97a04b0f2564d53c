"""An ``extends`` chain of MAX_EXTENDS (16) files loads; one file more is refused, as docs/configuration.md says."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.config import MAX_EXTENDS, read_config_file
from chillfl.errors import ConfigError


def _chain(folder: Path, files: int) -> Path:
    """``c0.toml`` extending ``c1.toml`` ... up to ``c{files-1}.toml``: a chain of ``files`` files."""
    for i in range(files - 1):
        (folder / f"c{i}.toml").write_text(f'extends = "c{i + 1}.toml"\n')
    (folder / f"c{files - 1}.toml").write_text("seed = 7\n")
    return folder / "c0.toml"


def test_a_chain_of_exactly_max_extends_files_loads(tmp_path: Path) -> None:
    assert MAX_EXTENDS == 16
    assert read_config_file(_chain(tmp_path, MAX_EXTENDS)) == {"seed": 7}


def test_a_chain_of_one_file_more_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^extends: chain longer than 16 files"):
        read_config_file(_chain(tmp_path, MAX_EXTENDS + 1))

"""A comparison folder whose config.toml is missing (or a folder): ``status`` blamed sweep.json, "is
unreadable (FileNotFoundError: ... config.toml)"; now its line names config.toml (fsfault finding 6)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from chillfl.cli import main

from test_damaged_files import _one_line_error
from test_fsfix_compare_names import finished  # noqa: F401  (the fixture)


@pytest.mark.parametrize("folder_in_place", [False, True])
def test_a_comparison_without_its_config_toml_names_that_file(finished: Path, tmp_path: Path, folder_in_place: bool,  # noqa: F811
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    copy = Path(shutil.copytree(finished, tmp_path / finished.name, symlinks=True))
    (copy / "config.toml").unlink()
    if folder_in_place:
        (copy / "config.toml").mkdir()
    assert main(["status", str(copy)]) == 2
    line = _one_line_error(capsys, f"{copy / 'config.toml'} is unreadable")
    assert "sweep.json" not in line

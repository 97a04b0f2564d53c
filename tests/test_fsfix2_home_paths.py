"""``~`` in ``out_dir`` / ``data_dir`` is the home folder (fsfault finding 5): a config file is read by no shell, and
``out_dir = "~/results"`` wrote into a folder literally named ``~`` in the current one, ``data_dir = "~/data"`` looked
in ``./~/data`` while the error line printed ``~/data/...``, which reads as the home folder that held the files."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.config import load_config


def test_a_tilde_in_the_config_paths_is_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config_file = tmp_path / "c.toml"
    config_file.write_text('out_dir = "~/results"\ndata_dir = "~/data"\n')
    config = load_config(str(config_file), {})
    assert (config.out_dir, config.data_dir) == (str(tmp_path / "home" / "results"), str(tmp_path / "home" / "data"))
    override = load_config(None, {"out_dir": "~", "data_dir": "./~/data"})  # the command line, quoted; ./~ stays a folder named ~
    assert (override.out_dir, override.data_dir) == (str(tmp_path / "home"), "./~/data")
    assert override.to_dict()["out_dir"] == str(tmp_path / "home")  # what config.toml records

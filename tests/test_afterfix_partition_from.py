"""A relative ``partition.from`` that is not there says where it was looked for (a result folder's config.toml keeps the
path as typed where its run started, and a rerun from elsewhere failed with a bare FileNotFoundError)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main


def test_a_missing_relative_partition_file_names_the_folder_it_was_read_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.toml"
    config.write_text('[dataset]\nname = "digits"\n[partition]\nfrom = "moved/base/partition.json"\n[federation]\nnum_clients = 4\n',
                      encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: partition.from: cannot read 'moved/base/partition.json'")
    assert "relative path is read from the folder the command runs in" in err[0] and "FileNotFoundError" in err[0]


def test_an_absolute_missing_path_says_nothing_of_folders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "run.toml"
    config.write_text(f'[dataset]\nname = "digits"\n[partition]\nfrom = "{tmp_path / "none.json"}"\n[federation]\nnum_clients = 4\n',
                      encoding="utf-8")
    assert main(["run", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "FileNotFoundError" in err and "relative path" not in err

"""Review rev99b, finding 5: the ``partition.from`` relative-path hint ("read from the folder the command runs in") was
added to every error, a malformed file found in that very folder included: it sent the user to look for another folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main


def test_a_malformed_relative_partition_file_says_nothing_of_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p.json").write_text("{bad json", encoding="utf-8")
    config = tmp_path / "run.toml"
    config.write_text('[dataset]\nname = "digits"\n[partition]\nfrom = "p.json"\n[federation]\nnum_clients = 4\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("chillfl: error: partition.from: cannot read 'p.json': JSONDecodeError")
    assert "relative path" not in err[0]

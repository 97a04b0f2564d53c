"""Config values the fuzzer got through: ``algorithm.delta <= -1`` of PA3Fed (every round a CLP, ``mode = "always"``
under another name), and an ``extends`` that names a folder ("file not found") or a file that is no TOML (an error on
field ``config`` that did not say which file extended it)."""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl
from chillfl.cli import main
from chillfl.config import read_config_file
from chillfl.errors import ConfigError


@pytest.mark.parametrize("delta", [-1, -1.5, -100])
def test_pa3fed_refuses_a_delta_of_minus_one_or_below(delta: float) -> None:
    """Eq. 6's (FGN(t) - FGN(t-1)) / FGN(t-1) is never below -1: such a delta flags every round, silently."""
    assert chillfl.make_config({"algorithm": {"name": "pa3fed", "delta": -0.5}}).algorithm["delta"] == -0.5  # a fall of half still reads
    with pytest.raises(ConfigError) as info:
        chillfl.make_config({"algorithm": {"name": "pa3fed", "delta": delta}})
    assert info.value.field == "algorithm.delta"
    assert "must be > -1" in info.value.message and '"always"' in info.value.message


def test_pa3fed_delta_on_the_command_line_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "algorithm.name=pa3fed", "algorithm.delta=-1", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("chillfl: error: algorithm.delta: must be > -1") and len(err.splitlines()) == 1, err


def test_extends_naming_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.toml").write_text('extends = "sub"\n')
    with pytest.raises(ConfigError) as info:
        read_config_file(tmp_path / "a.toml")
    assert info.value.field == "extends"
    assert "is a folder, not a config file" in info.value.message and "not found" not in info.value.message
    assert info.value.message.endswith(f"in {tmp_path / 'a.toml'}")


@pytest.mark.parametrize(("content", "words"), [(b"\xff\xfe\x00\x01binary", "is not a UTF-8 text file"), (b"x = = 1\n", "malformed TOML")])
def test_extends_naming_a_file_that_is_no_toml_names_extends_and_the_file_that_says_it(tmp_path: Path, content: bytes, words: str) -> None:
    (tmp_path / "base.bin").write_bytes(content)
    (tmp_path / "a.toml").write_text('extends = "base.bin"\n')
    with pytest.raises(ConfigError) as info:
        read_config_file(tmp_path / "a.toml")
    assert info.value.field == "extends", str(info.value)
    assert words in info.value.message and str(tmp_path / "base.bin") in info.value.message
    assert info.value.message.endswith(f"(extends = 'base.bin' in {tmp_path / 'a.toml'})"), info.value.message


def test_the_top_level_file_that_is_no_toml_is_still_an_error_on_config(tmp_path: Path) -> None:
    """Only a base reached through ``extends`` is named so; the file given stays ``config``, as before."""
    (tmp_path / "b.toml").write_bytes(b"x = = 1\n")
    (tmp_path / "a.toml").write_text('extends = "sub"\n')
    (tmp_path / "sub").mkdir()
    with pytest.raises(ConfigError) as info:
        read_config_file(tmp_path / "b.toml")
    assert info.value.field == "config"
    with pytest.raises(ConfigError, match="is a folder"):  # the part that fails on the old code
        read_config_file(tmp_path / "a.toml")

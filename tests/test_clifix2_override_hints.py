"""An override value that is not TOML is a bare string: a type error on it says how to quote it (``log.sinks=[csv]`` was
refused as "expected a list, got '[csv]'", a list refused as no list; ``name=123`` as "expected a string")."""

from __future__ import annotations

from pathlib import Path

import pytest

from chillfl.cli import main
from test_clifix2_datasets import BASE



@pytest.mark.parametrize("override,said", [
    ("log.sinks=[csv]", "log.sinks: expected a list, got '[csv]' (an override's value is read as TOML, and [csv] is not TOML, so it was one string; "
                        "quote the strings inside it, and the override for the shell: 'log.sinks=[\"csv\"]')"),
    ("log.sinks=[csv, \"jsonl\"]", "log.sinks: expected a list, got '[csv, \"jsonl\"]' (an override's value is read as TOML, and [csv, \"jsonl\"] is not "
                                   "TOML, so it was one string; quote the strings inside it, and the override for the shell: 'log.sinks=[\"csv\", \"jsonl\"]')"),
    ("model.hidden=[64,", "model.hidden: expected a list, got '[64,' (an override's value is read as TOML, and [64, is not TOML, so it was one string; "
                          "write it as TOML: items between commas, strings in quotes, and quote the override for the shell)"),
    ("name=123", "name: expected a string, got 123 (an override's value is read as TOML; for the string, quote it, and the override for the shell: "
                 "'name=\"123\"')"),
    ("log.sinks=csv", "log.sinks: expected a list, got 'csv'"),  # a word, not a list that failed to parse: as it was
])
def test_a_type_error_on_an_override_says_how_to_quote_it(override: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    assert main(["run", str(path), "--dry-run", override]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"chillfl: error: {said}"]


def test_the_suggested_quoting_is_read_as_meant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "base.toml"
    path.write_text(BASE)
    assert main(["run", str(path), "--dry-run", 'log.sinks=["csv"]', 'name="123"']) == 0
    out = capsys.readouterr().out
    assert 'sinks = [\n    "csv",\n]' in out or 'sinks = ["csv"]' in out
    assert 'name = "123"' in out


def test_no_hint_for_an_error_of_the_config_file() -> None:
    from chillfl.config import override_hint

    assert override_hint("name", "expected a string, got 123", []) == ""
    assert override_hint("name", "expected a string, got 123", ["client.lr=0.1"]) == ""

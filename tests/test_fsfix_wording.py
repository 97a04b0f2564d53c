"""What a config file or a run folder is, said as it is: a FIFO or a symbolic-link loop given as a config (or as its
``extends``) was "file not found"; a UTF-8 byte-order mark (Windows Notepad) made a config "malformed TOML" at line 1,
column 1; ``status`` called a finished run whose ``summary.json`` was lost "stopped (early, by a callback)", and one whose
``metrics.jsonl`` is a directory or a FIFO plainly finished."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.runner import run_experiment
from chillfl.storage.run_folder import config_changes
from chillfl.storage.run_state import folder_state
from test_damaged_files import TINY

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="os.mkfifo: FIFOs are made on POSIX systems only")
needs_links = pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links on this platform")


@needs_fifo
def test_a_fifo_given_as_the_config_is_said_to_be_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    os.mkfifo("fifo.toml")
    assert main(["run", "fifo.toml"]) == 2
    assert capsys.readouterr().err == "chillfl: error: config: 'fifo.toml' is a FIFO, not a config file\n"
    with pytest.raises(ConfigError) as info:  # from Python: read_toml's own check, the same words
        load_config("fifo.toml")
    assert info.value.field == "config" and info.value.message == "'fifo.toml' is a FIFO, not a config file"


@needs_links
def test_a_symbolic_link_loop_given_as_the_config_is_said_to_be_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    Path("loop.toml").symlink_to("loop.toml")
    assert main(["run", "loop.toml"]) == 2
    assert capsys.readouterr().err == "chillfl: error: config: 'loop.toml' is a symbolic-link loop, not a config file\n"


@needs_fifo
@needs_links
@pytest.mark.parametrize("kind", ["fifo", "loop"])
def test_extends_naming_a_fifo_or_a_link_loop_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.chdir(tmp_path)
    if kind == "fifo":
        os.mkfifo("base.toml")
    else:
        Path("base.toml").symlink_to("base.toml")
    Path("run.toml").write_text('extends = "base.toml"\n')
    with pytest.raises(ConfigError) as info:
        load_config("run.toml")
    what = "a FIFO" if kind == "fifo" else "a symbolic-link loop"
    assert info.value.field == "extends" and info.value.message == f"'base.toml' is {what}, not a config file in run.toml", info.value.message


def test_a_config_with_a_byte_order_mark_reads_as_without(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    text = 'name = "bom"\n[federation]\nrounds = 2\n'
    Path("bom.toml").write_bytes(b"\xef\xbb\xbf" + text.encode())
    Path("plain.toml").write_text(text)
    assert load_config("bom.toml").to_dict() == load_config("plain.toml").to_dict()
    assert main(["run", "--dry-run", "bom.toml"]) == 0
    Path("two.toml").write_bytes(b"\xef\xbb\xbf\xef\xbb\xbf" + text.encode())  # one is dropped, not any number
    with pytest.raises(ConfigError, match="malformed TOML"):
        load_config("two.toml")


def test_a_byte_order_mark_added_to_a_saved_config_is_no_change_of_its_values() -> None:
    """A resume named it "no longer the same TOML"; it is the same values, only the text changed."""
    saved = 'name = "x"\n[client]\nlr = 0.05\n'
    assert config_changes(saved, b"\xef\xbb\xbf" + saved.encode()) == "its text changed (same values)"


@pytest.fixture
def finished(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    out = run_experiment(load_config(None, {**TINY, "name": "done", "out_dir": str(tmp_path)}), progress=False)
    assert out.folder == tmp_path / "done"
    return out.folder


def _fifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("os.mkfifo: FIFOs are made on POSIX systems only")
    os.mkfifo(path)


def _replace(path: Path, make: str) -> None:
    """Remove ``path``'s file, leaving nothing (``missing``), a folder or a FIFO in its place."""
    path.unlink()
    if make == "directory":
        path.mkdir()
    elif make == "fifo":
        _fifo(path)


@pytest.mark.parametrize("make", ["missing", "directory", "fifo"])
def test_status_of_a_finished_run_whose_summary_is_lost_says_so(finished: Path, make: str) -> None:
    _replace(finished / "summary.json", make)
    state = folder_state(finished, "done", 2)
    lost = "is missing" if make == "missing" else "is no regular file"
    assert (state.kind, state.detail, state.rounds) == ("finished", f"its summary.json {lost}", 2), state


@pytest.mark.parametrize("make", ["directory", "fifo"])
def test_status_of_a_finished_run_whose_metrics_are_no_file_says_so(finished: Path, make: str) -> None:
    _replace(finished / "metrics.jsonl", make)
    state = folder_state(finished, "done", 2)
    assert (state.kind, state.detail, state.rounds) == ("finished", "its metrics.jsonl cannot be read (or is no regular file)", 2), state

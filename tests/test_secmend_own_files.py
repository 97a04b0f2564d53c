"""A run's ``summary.json`` (``chillfl report``) and a comparison's ``sweep.json`` on the resume/status path
(:func:`~chillfl.storage.run_folder.sweep_started_in`) are read as a received folder's own files
(:func:`chillfl.paths.read_own_file`): read with ``read_text`` after ``is_file()``, a FIFO hung the reader and a link
out of the folder was followed (its JSON shown as the run's summary)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chillfl.errors import ConfigError
from chillfl.report.html import load_run
from chillfl.storage.run_folder import STARTED_IN, SWEEP_FILE, sweep_started_in
from test_secfix_report_readers import _within


def test_a_fifo_summary_is_refused_on_run_dir_not_waited_on(tmp_path: Path) -> None:
    run = tmp_path / "r"
    run.mkdir()
    fifo = run / "summary.json"
    os_mkfifo(fifo)

    def read() -> str:
        with pytest.raises(ConfigError) as caught:
            load_run(run)
        return str(caught.value)

    said = _within(read, fifo)
    assert "summary.json is not a regular file" in said and said.startswith("RUN_DIR")


def test_a_summary_linked_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps({"final_global_acc": 0.99}))
    run = tmp_path / "r"
    run.mkdir()
    (run / "summary.json").symlink_to(outside)
    with pytest.raises(ConfigError, match="summary.json is a symbolic link"):
        load_run(run)


def test_a_fifo_or_linked_sweep_record_is_no_record_of_the_start_folder(tmp_path: Path) -> None:
    started = tmp_path / "elsewhere"
    started.mkdir()
    outside = tmp_path / "other.json"
    outside.write_text(json.dumps({STARTED_IN: str(started)}))
    linked = tmp_path / "a-compare"
    linked.mkdir()
    (linked / SWEEP_FILE).symlink_to(outside)
    plain = tmp_path / "b-compare"
    plain.mkdir()
    (plain / SWEEP_FILE).write_text(json.dumps({STARTED_IN: str(started)}))
    assert sweep_started_in(plain) == started  # the record read
    assert sweep_started_in(linked) != started  # the link's target is not this folder's record
    piped = tmp_path / "c-compare"
    piped.mkdir()
    os_mkfifo(piped / SWEEP_FILE)
    assert _within(lambda: sweep_started_in(piped), piped / SWEEP_FILE) != started


def os_mkfifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):  # pragma: no cover - Windows
        pytest.skip("FIFOs are POSIX")
    os.mkfifo(path)

"""A comparison's ``sweep.json`` on the resume/status path (:func:`~chillfl.storage.run_folder.sweep_started_in`) is read
as the report reads it (:func:`chillfl.paths.read_own_file`, as :func:`chillfl.run_names.comparison_labels` does): read
with ``read_text``, a FIFO hung the reader and a link out of the folder was taken for the comparison's record.
(A run's ``summary.json`` is followed through a link, as its ``metrics.jsonl`` is: ``cp -rs`` and DataLad copies.)"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from chillfl.storage.run_folder import STARTED_IN, SWEEP_FILE, start_folder, sweep_started_in
from test_secfix_report_readers import _within


def test_a_fifo_or_linked_sweep_record_is_no_record_of_the_start_folder(tmp_path: Path) -> None:
    """Each folder is ``<tmp_path>/runs/<name>`` with ``out_dir = "runs"``: with no record read, the start folder is the
    fallback start_folder documents, the one its relative out_dir tells (tmp_path), not the link's or anything else."""
    started = tmp_path / "elsewhere"
    started.mkdir()
    outside = tmp_path / "other.json"
    outside.write_text(json.dumps({STARTED_IN: str(started)}))

    def folder(name: str) -> Path:
        made = tmp_path / "runs" / name
        made.mkdir(parents=True)
        (made / "config.toml").write_text('out_dir = "runs"\n')
        return made

    linked = folder("a-compare")
    (linked / SWEEP_FILE).symlink_to(outside)
    plain = folder("b-compare")
    (plain / SWEEP_FILE).write_text(json.dumps({STARTED_IN: str(started)}))
    assert sweep_started_in(plain) == started  # the record read
    assert sweep_started_in(linked) == tmp_path == start_folder(linked, None)  # the link's target is not this folder's record
    piped = folder("c-compare")
    os_mkfifo(piped / SWEEP_FILE)
    assert _within(lambda: sweep_started_in(piped), piped / SWEEP_FILE) == tmp_path == start_folder(piped, None)


def os_mkfifo(path: Path) -> None:
    if not hasattr(os, "mkfifo"):  # pragma: no cover - Windows
        pytest.skip("FIFOs are POSIX")
    os.mkfifo(path)

"""Review of the received-folder hardening: nested JSON read by the readers it missed, a folder named ``*.png`` in a
comparison, two run labels that escape alike, and the temperature sweep's score under ``init = false``."""

from __future__ import annotations

import json
from pathlib import Path


from chillfl.analysis.replay import diverged_at, run_label
from chillfl.analysis.temperature_sweep import reads_score, score_options
from chillfl.config import config_from_dict
from chillfl.report.html import _own_file
from chillfl.run_names import comparison_labels
from chillfl.storage.run_folder import _stopped

from received_folder import DEEP


def test_deep_json_in_the_files_the_other_readers_read_is_a_damaged_file(tmp_path: Path) -> None:
    """Each reader treats it as it treats any unreadable file (no RecursionError traceback from report, analyze, resume)."""
    (tmp_path / "sweep.json").write_text(DEEP)
    (tmp_path / "failure.json").write_text(DEEP)
    (tmp_path / "summary.json").write_text(DEEP)
    assert comparison_labels(tmp_path) == {}
    assert diverged_at(tmp_path) == " (see its failure.json)"  # without the round, as for any unreadable file
    assert _stopped(tmp_path) is False


def test_a_folder_named_like_a_figure_is_left_out_and_closes_its_descriptor(tmp_path: Path) -> None:
    import os

    (tmp_path / "dir.png").mkdir()
    before = len(os.listdir("/proc/self/fd"))
    assert _own_file(tmp_path / "dir.png", png=True) == "not a regular file"
    assert len(os.listdir("/proc/self/fd")) == before


def test_two_names_that_escape_alike_keep_two_labels(tmp_path: Path) -> None:
    a, b = tmp_path / "x" / "a\x1b", tmp_path / "y" / "a\\x1b"
    labels = [run_label(a, [a, b]), run_label(b, [a, b])]
    assert len(set(labels)) == 2 and all("\x1b" not in label for label in labels), labels


def test_the_sweep_reads_no_score_option_a_run_with_init_false_ignores() -> None:
    base = {"name": "s", "device": "cpu", "dataset": {"name": "digits"}, "model": {"name": "mlp"}}
    off = config_from_dict({**base, "temperature": {"policy": "fedchill", "init": False, "p_g": [0.5, 0.5]}})
    on = config_from_dict({**base, "temperature": {"policy": "fedchill"}})
    assert not reads_score(off) and reads_score(on)
    options, note = score_options(off)
    assert options.p_g is None and note is not None and "temperature.init = false" in note
    assert score_options(on)[1] is None
    assert json.dumps(note)  # one line of text

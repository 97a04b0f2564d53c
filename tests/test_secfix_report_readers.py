"""``chillfl report`` reads a comparison folder's ``sweep.json``, ``table.json`` and ``<run>.failed/failure.json`` as it
reads the folder's figures and ``table.md`` (:func:`chillfl.paths.read_own_file`): only a regular file of at most
50 MB, never through a link. Read with ``read_text``, a FIFO hung the report forever, a link to /dev/zero filled the
memory, and a link out of the folder was followed (a ``failure.json -> ~/secret.json`` had its text shown in the page).

A FIFO is read on a thread: if the reader blocks, the test opens the FIFO's other end to let it go, then fails."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable, TypeVar

import pytest

from chillfl.report.html import OWN_FILE_LIMIT, _comparison_section, selected_points
from chillfl.run_names import comparison_labels
from test_reportfix2_tuned import tuned_comparison

T = TypeVar("T")

if not hasattr(os, "mkfifo"):  # pragma: no cover - Windows
    pytest.skip("FIFOs are POSIX", allow_module_level=True)


def _within(call: Callable[[], T], fifo: Path, seconds: float = 10.0) -> T:
    """``call()``'s result, failing the test if it is still blocked (on ``fifo``) after ``seconds``."""
    out: list[T] = []
    worker = threading.Thread(target=lambda: out.append(call()), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # the blocked reader is there: its writer opens, closes, it reads EOF
        os.close(fd)
        worker.join(seconds)
        pytest.fail(f"the reader blocked on the FIFO {fifo.name}")
    return out[0]


def _padded(path: Path, text: str) -> None:
    """``text`` followed by whitespace to just over :data:`OWN_FILE_LIMIT` bytes: still valid JSON, read whole before."""
    with path.open("wb") as fh:
        fh.write(text.encode())
        fh.write(b" " * (OWN_FILE_LIMIT + 1 - len(text)))


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    """A tuned comparison (sweep.json, table.json, table.md, four runs) and a diverged run ``x.failed``."""
    made = tuned_comparison(tmp_path / "c-compare")
    (made / "x.failed").mkdir()
    return made


def _diverged(page: list[str]) -> list[str]:
    return [line for line in page if line.startswith("<li>")]


def test_the_folder_as_written_is_read(folder: Path) -> None:
    """The control: the same files, regular, give the labels, the selection and the diverged run's reason."""
    (folder / "x.failed" / "failure.json").write_text(json.dumps({"round": 3, "what": "loss"}))
    assert sorted(comparison_labels(folder).values()) == ["A, client.lr=0.01", "A, client.lr=0.1", "B, client.lr=0.01", "B, client.lr=0.1"]
    selection = selected_points(folder)
    assert selection is not None and selection.labels == {"A, client.lr=0.01", "B, client.lr=0.1"}
    page = _comparison_section(folder)
    assert _diverged(page) == ["<li>x: diverged at round 3 (loss)</li>"] and not any("left out" in line for line in page)


@pytest.mark.parametrize("name", ["sweep.json", "table.json"])
def test_a_fifo_sweep_or_table_json_does_not_hang_the_report(folder: Path, name: str) -> None:
    (folder / name).unlink()
    os.mkfifo(folder / name)
    assert _within(lambda: selected_points(folder), folder / name) is None
    if name == "sweep.json":
        assert _within(lambda: comparison_labels(folder), folder / name) == {}


def test_a_fifo_failure_json_does_not_hang_the_report_and_is_named(folder: Path) -> None:
    os.mkfifo(folder / "x.failed" / "failure.json")
    page = _within(lambda: _comparison_section(folder), folder / "x.failed" / "failure.json")
    assert _diverged(page) == ["<li>x: failed</li>"]
    assert '<p class="muted">left out of this page: x.failed/failure.json (not a regular file)</p>' in page


@pytest.mark.parametrize("name", ["sweep.json", "table.json"])
def test_a_sweep_or_table_json_linked_out_of_the_folder_is_not_followed(folder: Path, tmp_path: Path, name: str) -> None:
    outside = tmp_path / f"elsewhere-{name}"
    (folder / name).rename(outside)  # the comparison's own record, now outside the folder: readable, were it followed
    (folder / name).symlink_to(outside)
    assert selected_points(folder) is None
    if name == "sweep.json":
        assert comparison_labels(folder) == {}


def test_a_failure_json_linked_out_of_the_folder_is_not_shown(folder: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"round": 3, "what": "SECRET-TOKEN-123"}))
    (folder / "x.failed" / "failure.json").symlink_to(secret)
    page = _comparison_section(folder)
    assert not any("SECRET" in line for line in page)
    assert _diverged(page) == ["<li>x: failed</li>"]
    assert '<p class="muted">left out of this page: x.failed/failure.json (a symbolic link)</p>' in page


@pytest.mark.parametrize("name", ["sweep.json", "table.json"])
def test_an_oversized_sweep_or_table_json_is_not_read(folder: Path, name: str) -> None:
    _padded(folder / name, (folder / name).read_text())
    assert selected_points(folder) is None
    if name == "sweep.json":
        assert comparison_labels(folder) == {}


def test_an_oversized_failure_json_is_not_read_and_is_named(folder: Path) -> None:
    _padded(folder / "x.failed" / "failure.json", json.dumps({"round": 3, "what": "loss"}))
    page = _comparison_section(folder)
    assert _diverged(page) == ["<li>x: failed</li>"]
    assert '<p class="muted">left out of this page: x.failed/failure.json (over 50 MB)</p>' in page


def test_a_missing_failure_json_is_still_failed_without_a_note(folder: Path) -> None:
    page = _comparison_section(folder)
    assert _diverged(page) == ["<li>x: failed</li>"] and not any("left out" in line for line in page)

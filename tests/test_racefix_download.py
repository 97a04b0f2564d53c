"""Two downloads of one dataset into one ``data_dir`` at once: the second waits for the first (a lock on
``.downloads/NAME.lock``) and then finds it installed, instead of appending to its ``.part`` and removing its folder."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from chillfl.data.download import DOWNLOADS, MARKER, download_dataset
from fake_datasets import GENERATORS, ServerState, publish, serve
from test_download import _checksums, _leftovers


class _GatedFiles(dict[str, bytes]):
    """The server's files; the first lookup (the first download's first request) waits until ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = threading.Event()
        self.release = threading.Event()

    def get(self, key: str, default: bytes | None = None) -> bytes | None:  # type: ignore[override]
        if not self.asked.is_set():
            self.asked.set()
            assert self.release.wait(10)
        return super().get(key, default)


class _Seen(logging.Handler):
    def __init__(self, needle: str) -> None:
        super().__init__()
        self.needle, self.event, self.lines = needle, threading.Event(), []  # type: list[str]

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        if self.needle in record.getMessage():
            self.event.set()


def test_second_download_waits_for_the_first_and_finds_it_installed(tmp_path: Path) -> None:
    files = GENERATORS["mnist"]()
    gated = _GatedFiles()
    state = ServerState(files=gated)
    publish(state, "mnist", files)
    sums = _checksums("mnist", files, tmp_path)
    data = tmp_path / "data"
    seen = _Seen("waiting for another download of mnist")
    logger = logging.getLogger("chillfl")
    logger.addHandler(seen)
    level = logger.level
    logger.setLevel(logging.INFO)
    results: dict[str, object] = {}

    def go(key: str) -> None:
        try:
            results[key] = download_dataset("mnist", data, mirror=base, checksums=sums, timeout=10)
        except Exception as exc:  # noqa: BLE001 - the old code's failure, shown by the assertion below
            results[key] = exc

    try:
        with serve(state) as base:
            first = threading.Thread(target=go, args=("first",))
            first.start()
            assert gated.asked.wait(10)  # the first holds its lock, its first request stopped at the server
            second = threading.Thread(target=go, args=("second",))
            second.start()
            while not seen.event.is_set() and second.is_alive():  # waiting (new code) or done without waiting (old)
                seen.event.wait(0.02)
            gated.release.set()
            first.join(20)
            second.join(20)
    finally:
        logger.removeHandler(seen)
        logger.setLevel(level)
    assert seen.event.is_set(), seen.lines
    assert results == {"first": data / "mnist", "second": data / "mnist"}
    assert len(state.requests) == len(files)  # fetched once
    assert (data / "mnist" / MARKER).is_file()
    assert sum("waiting for another download" in line for line in seen.lines) == 1
    assert any("mnist is already in" in line for line in seen.lines)
    assert not (data / DOWNLOADS).exists() and _leftovers(data) == []


def test_a_refused_download_leaves_no_lock_behind(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "mnist").mkdir(parents=True)
    from chillfl.data.download import DownloadRequestError

    with pytest.raises(DownloadRequestError):
        download_dataset("mnist", data, mirror="http://127.0.0.1:9")
    assert sorted(p.name for p in data.iterdir()) == ["mnist"]

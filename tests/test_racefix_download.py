"""Two downloads of one dataset into one ``data_dir`` at once: the second waits for the first (a lock on
``.downloads/NAME.lock``) and then finds it installed, instead of appending to its ``.part`` and removing its folder."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from chillfl.data import download
from chillfl.data.download import DOWNLOADS, MARKER, _dataset_lock, download_dataset
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


class _Flock:
    """``fcntl`` as download.py sees it: logs each blocking wait (by thread name) and holds thread B after its first
    wait returns, so a third download can lock the new file before B looks at it (no sleeps, one order every run)."""

    def __init__(self, real: Any, events: list[str], changed: threading.Condition) -> None:
        self.LOCK_EX, self.LOCK_NB, self.real = real.LOCK_EX, real.LOCK_NB, real
        self.events, self.changed, self.resume_b = events, changed, threading.Event()

    def flock(self, fd: int, op: int) -> None:
        if op & self.LOCK_NB:
            return self.real.flock(fd, op)
        name = threading.current_thread().name
        with self.changed:
            self.events.append(f"{name} waits")
            self.changed.notify_all()
        self.real.flock(fd, op)
        if name == "B" and self.events.count("B waits") == 1:
            assert self.resume_b.wait(10)
        return None


def test_a_waiter_whose_lock_file_was_removed_locks_the_new_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three downloads: A holds; B waits on A's lock file; A finishes (removes the file, then unlocks) and C locks a new
    one; B, holding the removed file's lock, must wait for C (one warning only) instead of installing beside it."""
    real = pytest.importorskip("fcntl")
    events: list[str] = []
    changed = threading.Condition()
    flock = _Flock(real, events, changed)
    monkeypatch.setattr(download, "fcntl", flock)
    seen = _Seen("waiting for another download of mnist")
    logger = logging.getLogger("chillfl")
    logger.addHandler(seen)
    level = logger.level
    logger.setLevel(logging.INFO)
    go = {"B": threading.Event(), "C": threading.Event()}
    errors: list[BaseException] = []

    def party(name: str) -> None:
        try:
            with _dataset_lock(tmp_path, "mnist"):
                with changed:
                    events.append(f"{name} in")
                    changed.notify_all()
                assert go[name].wait(10)
                with changed:
                    events.append(f"{name} out")
        except BaseException as exc:  # noqa: BLE001 - shown by the assertion below
            errors.append(exc)

    def until(done: Callable[[], bool]) -> None:
        with changed:
            assert changed.wait_for(done, 10), events

    threads = {name: threading.Thread(target=party, args=(name,), name=name) for name in ("B", "C")}
    try:
        with _dataset_lock(tmp_path, "mnist"):  # A
            threads["B"].start()
            until(lambda: "B waits" in events)
        threads["C"].start()  # A removed its lock file: C makes a new one and locks it
        until(lambda: "C in" in events)
        flock.resume_b.set()
        until(lambda: events.count("B waits") == 2 or "B in" in events)
        assert "B in" not in events, "B installs while C holds the lock"
        go["C"].set()
        until(lambda: "B in" in events)
    finally:
        flock.resume_b.set()
        for name, thread in threads.items():
            go[name].set()
            if thread.ident is not None:  # started
                thread.join(10)
        logger.removeHandler(seen)
        logger.setLevel(level)
    assert errors == [] and events == ["B waits", "C in", "B waits", "C out", "B in", "B out"]
    assert sum("waiting for another download" in line for line in seen.lines) == 1, seen.lines  # B's, once
    assert not (tmp_path / DOWNLOADS / "mnist.lock").exists()

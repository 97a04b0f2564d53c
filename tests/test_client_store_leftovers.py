"""A SIGKILLed run's on-disk client store (``chillfl-clients-*``) is removed by the next store made in the same folder.

A process killed with SIGKILL runs no clean-up: its store's folder stayed in TMPDIR for good, one per killed
SCARLET run. Each store now holds an ``flock`` on its folder while its owner lives; a new store removes the
folders whose lock nobody holds, never one a live process holds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chillfl.protocols.softlabels.store import ClientStore
from chillfl.storage.results import RunLock

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    from chillfl.protocols.softlabels.state import ClientState
    from chillfl.protocols.softlabels.store import ClientStore

    store = ClientStore(on_disk=True, state_dir=sys.argv[1])
    store.save(0, ClientState({"w": torch.zeros(2)}))
    print(store.root, flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.stdin.read()  # alive until the test closes stdin
    store.close()
    """
)


def _child(folder: Path, mode: str) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(folder), mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_killed_stores_folder_is_removed_and_a_live_ones_kept(tmp_path: Path) -> None:
    killed, dead_root = _child(tmp_path, "kill")
    assert killed.wait(timeout=60) == -signal.SIGKILL
    assert (dead_root / "client-0.pt").is_file() and dead_root.name.startswith("chillfl-clients-")  # what SIGKILL leaves behind
    live, live_root = _child(tmp_path, "live")
    try:
        assert not dead_root.exists()  # its owner is gone: the next store removed it
        assert (live_root / "client-0.pt").is_file()
        store = ClientStore(on_disk=True, state_dir=str(tmp_path))
        try:
            assert (live_root / "client-0.pt").is_file()  # its owner holds it: kept
            assert store.root is not None and store.root.is_dir()
        finally:
            store.close()
    finally:
        live.communicate("", timeout=60)
    assert live.returncode == 0 and not live_root.exists()
    assert list(tmp_path.iterdir()) == []


def test_a_store_never_removes_another_live_store_in_the_same_process(tmp_path: Path) -> None:
    first = ClientStore(on_disk=True, state_dir=str(tmp_path))
    second = ClientStore(on_disk=True, state_dir=str(tmp_path))
    try:
        assert first.root is not None and first.root.is_dir() and second.root is not None and second.root.is_dir()
    finally:
        first.close()
        second.close()
    assert list(tmp_path.iterdir()) == []


def test_a_hidden_folder_left_by_a_kill_while_a_store_was_made_is_removed(tmp_path: Path) -> None:
    """A store's folder is made under a hidden name, locked, then renamed: a SIGKILL in that moment left
    ``.chillfl-clients-*``, which the sweep (of visible folders only) never removed."""
    left = tmp_path / ".chillfl-clients-killed"
    left.mkdir()
    (left / "client-0.pt").write_bytes(b"")
    store = ClientStore(on_disk=True, state_dir=str(tmp_path))
    try:
        assert not left.exists()
    finally:
        store.close()
    assert list(tmp_path.iterdir()) == []


def test_a_hidden_folder_a_live_process_holds_is_kept(tmp_path: Path) -> None:
    held = tmp_path / ".chillfl-clients-live"
    held.mkdir()
    lock = RunLock(held)  # what its maker holds between locking it and renaming it
    try:
        store = ClientStore(on_disk=True, state_dir=str(tmp_path))
        store.close()
        assert held.is_dir()
    finally:
        lock.release()


def test_a_store_whose_hidden_folder_is_swept_before_it_locks_it_makes_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one moment a live maker's folder is unlocked (made, not yet locked): another store's sweep may remove it."""
    import chillfl.storage.owned_temp as owned

    lock = owned._try_lock
    swept: list[str] = []

    def sweep_first(folder: Path) -> int | None:
        if not swept and folder.name.startswith(".chillfl-clients-"):
            swept.append(folder.name)
            owned.remove_unlocked(folder)  # another process's sweep, in the window
        return lock(folder)

    monkeypatch.setattr(owned, "_try_lock", sweep_first)
    store = ClientStore(on_disk=True, state_dir=str(tmp_path))
    try:
        assert swept and store.root is not None and store.root.is_dir() and store.root.name.startswith("chillfl-clients-")
        assert [p.name for p in tmp_path.iterdir()] == [store.root.name]
    finally:
        store.close()
    assert list(tmp_path.iterdir()) == []

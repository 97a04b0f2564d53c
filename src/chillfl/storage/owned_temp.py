"""Temporary folders that a killed owner leaves behind only until the next one is made beside them.

A process killed with SIGKILL runs no clean-up, so its temporary folder stays. Each folder made here is held
by an exclusive ``flock`` on the folder itself while its owner lives (the kernel releases it however the owner
ends, and it follows the folder across containers that share the file system, unlike a pid). Making a new
folder removes every folder of the same prefix whose lock nobody holds, never one a live process holds. A
folder is made under a hidden name (``.PREFIX*``), locked, and only then renamed to its prefix, so that a
visible folder is never unlocked while its owner lives. The sweep removes unlocked hidden ones too (a kill
between making and renaming one left it for good): a live maker whose hidden folder is swept in the instant
before it locks it finds it gone, and makes another.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; nothing is held, so nothing is swept
    fcntl = None  # type: ignore[assignment]

from chillfl.paths import O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW

_FLAGS = os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
_ATTEMPTS = 16
"""Folders a maker draws before it gives up: another is drawn when a sweep took one in the instant before it was locked."""


def _try_lock(folder: Path) -> int | None:
    """An open descriptor of ``folder`` holding its exclusive lock, or None (held by a live process, gone, or not ours to lock)."""
    if fcntl is None:
        return None
    try:
        fd = os.open(folder, _FLAGS)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_stale(parent: Path, prefix: str) -> None:
    """Remove the folders ``parent/prefix*`` and ``parent/.prefix*`` of this user whose lock no process holds (their owner is gone)."""
    if fcntl is None:
        return
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        try:
            if not entry.name.removeprefix(".").startswith(prefix) or not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
                continue
        except OSError:
            continue
        remove_unlocked(Path(entry.path))


def remove_unlocked(folder: Path, first: str | None = None) -> bool:
    """Remove ``folder`` if no process holds a lock on it (removed holding its exclusive lock: a second sweeper cannot
    race into it); False when one does, or it is gone. ``first``: a file removed before the rest (a marker that
    readers look for, so that none starts on a half-removed folder)."""
    fd = _try_lock(folder)
    if fd is None:
        return False
    try:
        if first is not None:
            (folder / first).unlink(missing_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        os.close(fd)
    return True


class OwnedTempDir:
    """A temporary folder ``DIR/PREFIXxxxxxxxx`` locked while this process lives; leftovers of killed owners are removed first."""

    def __init__(self, prefix: str, dir: str | None = None) -> None:
        parent = Path(dir) if dir is not None else Path(tempfile.gettempdir())
        remove_stale(parent, prefix)
        for attempt in range(_ATTEMPTS):
            staging = Path(tempfile.mkdtemp(prefix=f".{prefix}", dir=parent))  # hidden until locked
            self._fd = _try_lock(staging)
            path = staging.with_name(staging.name[1:])
            if self._fd is None and fcntl is not None and attempt < _ATTEMPTS - 1:  # another store's sweep took it first
                shutil.rmtree(staging, ignore_errors=True)  # gone already, unless this file system cannot lock (then: the last try goes unlocked)
                continue
            if not os.path.lexists(path):
                try:
                    staging.rename(path)  # the lock is on the folder, and follows it
                    break
                except FileNotFoundError:  # swept between its mkdtemp and its lock: the lock is on a removed folder
                    self._release()
                    continue
            self._release()  # the random name is taken (a leftover of another chillfl): draw another
            staging.rmdir()
        else:
            raise OSError(f"cannot make a {prefix}* folder in {parent}: each one made was taken before it could be locked")
        self.path: Path | None = path

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """Remove the folder, then give its lock up (idempotent)."""
        if self.path is not None:
            shutil.rmtree(self.path, ignore_errors=True)
            self.path = None
        self._release()

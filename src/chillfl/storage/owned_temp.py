"""Temporary folders that a killed owner leaves behind only until the next one is made beside them.

A process killed with SIGKILL runs no clean-up, so its temporary folder stays. Each folder made here is held
by an exclusive ``flock`` on the folder itself while its owner lives (the kernel releases it however the owner
ends, and it follows the folder across containers that share the file system, unlike a pid). Making a new
folder removes every folder of the same prefix whose lock nobody holds, never one a live process holds. A
folder is made under a hidden name, locked, and only then renamed to its prefix: no other process can find
it unlocked while its owner lives.
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
    """Remove the folders ``parent/prefix*`` of this user whose lock no process holds (their owner is gone)."""
    if fcntl is None:
        return
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        try:
            if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.getuid():
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
        while True:
            staging = Path(tempfile.mkdtemp(prefix=f".{prefix}", dir=parent))  # hidden: no sweep sees it unlocked
            self._fd = _try_lock(staging)
            path = staging.with_name(staging.name[1:])
            if not os.path.lexists(path):
                break
            self._release()  # the random name is taken (a leftover of another chillfl): draw another
            staging.rmdir()
        staging.rename(path)  # the lock is on the folder, and follows it
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

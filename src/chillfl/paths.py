"""Where chillfl may write: a user-given folder is checked before anything is created; how a command chillfl prints names
one; and how a results folder's own file is read without being followed out of it (:func:`read_own_file`).

Leaf module (imports only :mod:`chillfl.errors` and :mod:`chillfl.options`), so that config validation in
any layer can use it without importing upward.
"""

from __future__ import annotations

import errno
import os
import shlex
import stat
import tempfile
from pathlib import Path

from chillfl.errors import ConfigError
from chillfl.options import short_repr

PARTIAL = ".partial"
"""The suffix of a run folder still being written, or stopped before its end (resumable)."""
FAILED = ".failed"
"""The suffix of a run that diverged. Both live here, not in :mod:`chillfl.storage.results`, so that the small tables
that skip such folders (:mod:`chillfl.metrics.records`) need not import torch."""
CLAIM = ".claim-"
"""How the hidden folder a run's folder is made in starts (:class:`chillfl.storage.results.ResultWriter` locks it, then
renames it onto its name); one left by a claimer killed in between is no run, and the tables skip it."""
PARTITION_FILE = "partition.json"
"""A run folder's record of every client's rows (:mod:`chillfl.data.partition_file` writes and reads it). Here, so that
:mod:`chillfl.storage` names it without importing :mod:`chillfl.data` (which imports :mod:`chillfl.storage`)."""

O_DIRECTORY = os.O_DIRECTORY if hasattr(os, "O_DIRECTORY") else 0
O_NOFOLLOW = os.O_NOFOLLOW if hasattr(os, "O_NOFOLLOW") else 0
O_CLOEXEC = os.O_CLOEXEC if hasattr(os, "O_CLOEXEC") else 0
"""POSIX open flags; 0 where the platform lacks one (Windows), which only gives up that protection."""

OWN_FILE_LIMIT = 50 * 2**20
"""Bytes of a results folder's own file (a comparison's figure, ``table.md``, ``sweep.json``, ``failure.json``) read
at most: a link to ``/dev/zero`` named ``x.png`` filled the memory."""


def read_own_file(path: Path) -> bytes | str:
    """The bytes of a file a results folder holds, or why it is left out (a link, not a regular file, over
    :data:`OWN_FILE_LIMIT`, unreadable): how a folder someone sent is read as data.

    Why: a received folder's ``leak.png -> ~/secret.txt`` (or ``table.md``, ``failure.json -> ...``) was shown in the
    page, which is then shared; a FIFO hung the reader. Opened without following a link and without blocking, then
    checked again on the open file: a file swapped after the ``lstat`` is caught too."""
    try:
        if path.is_symlink():
            return "a symbolic link"
        fd = os.open(path, os.O_RDONLY | O_NOFOLLOW | O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        return "a symbolic link" if exc.errno == errno.ELOOP else f"unreadable: {exc.strerror or exc}"
    try:
        info = os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        return f"unreadable: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):  # before fdopen, which refuses a folder (IsADirectoryError) and would keep the fd
        os.close(fd)
        return "not a regular file"
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > OWN_FILE_LIMIT:
            return f"over {OWN_FILE_LIMIT // 2**20} MB"
        try:
            data = fh.read(OWN_FILE_LIMIT + 1)
        except OSError as exc:
            return f"unreadable: {exc.strerror or exc}"
    if len(data) > OWN_FILE_LIMIT:  # grew since its fstat
        return f"over {OWN_FILE_LIMIT // 2**20} MB"
    return data


def shell_path(path: str | Path) -> str:
    """``path`` as one shell word that names it from any folder: absolute, and quoted where a shell would split or expand it.

    For the commands chillfl prints for the user to run (``chillfl resume FOLDER``): a relative ``results/x.partial``
    named nothing once the user had changed folder or opened another terminal, and a space split it in two.
    """
    return shlex.quote(os.path.abspath(path))


def current_folder() -> str | None:
    """The absolute current folder, as a run or comparison records where it started (its relative ``data_dir`` and
    ``partition.from`` are read from there when it resumes: :meth:`chillfl.config.RunConfig.paths_from`); None when
    that folder was removed meanwhile (``os.getcwd`` fails): nothing is recorded then, and a resume reads them as before."""
    try:
        return os.getcwd()
    except OSError:
        return None


def check_writable_dir(folder: str, field: str) -> None:
    """Refuse a ``folder`` that cannot hold chillfl's files; ``field`` names it in the error.

    Walks up to the nearest existing ancestor: it must be a folder (not a
    file, nor a path under a file) that this user can write into, which is
    tried by creating and removing an empty folder there (``os.access`` says
    yes to root on ``/proc`` and similar file systems, where ``mkdir`` then
    fails). Missing folders below it are fine (they are created later), but no
    path component may exceed 255 bytes. Leaves nothing behind.
    """
    if not isinstance(folder, str) or not folder or "\0" in folder:
        raise ConfigError(field, f"must be a non-empty path without NUL characters, got {short_repr(folder)}")
    path = Path(folder).absolute()
    check_name_lengths(folder, field)
    probe = path
    try:
        while not probe.exists():
            if probe.is_symlink():  # a dangling link: mkdir would fail on it
                raise ConfigError(field, f"{probe} is a broken symbolic link")
            probe = probe.parent
        if not probe.is_dir():
            where = "is a file" if probe == path else f"sits under {probe}, which is a file"
            raise ConfigError(field, f"{folder} {where}, not a folder")
    except OSError as exc:
        raise ConfigError(field, f"cannot use {folder}: {exc.strerror or exc}") from None
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ConfigError(field, f"{probe} is on a read-only file system" if _read_only(probe) else f"{probe} is not writable by this user")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".chillfl-probe-", dir=probe))
    except OSError as exc:
        if exc.errno == errno.EROFS:
            raise ConfigError(field, f"{probe} is on a read-only file system") from None
        raise ConfigError(field, f"cannot create folders in {probe}: {exc.strerror or exc}") from None


def check_name_lengths(path: str | os.PathLike[str], field: str, added: str = "") -> None:
    """Refuse a ``path`` one of whose components is over 255 bytes, its last one with ``added`` (what chillfl puts after
    it: ``.png`` for a figure named without a suffix, ``.tmp`` for an atomic write), before any work or any folder is made.

    Why: on Python 3.11 ``Path.is_dir()``/``exists()`` raise for such a name (ENAMETOOLONG), a traceback; and a name
    under 255 bytes whose ``.tmp`` was over failed after the work, naming the temp file."""
    parts = Path(os.fspath(path)).parts
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if len(os.fsencode(part + added if last else part)) > 255:
            adds = f" (with the {added} chillfl adds)" if last and added else ""
            raise ConfigError(field, f"a path component is longer than 255 bytes{adds}: {part[:40]!r}...")


def _read_only(folder: Path) -> bool:
    """Whether ``folder``'s file system is mounted read-only: no permission of this user's would let a write through, and
    "not writable by this user" sent them to chmod (a read-only bind mount of a container, a cluster's read-only share)."""
    if not hasattr(os, "statvfs") or not hasattr(os, "ST_RDONLY"):  # pragma: no cover - not POSIX
        return False
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def make_temp_dir(prefix: str, parent: Path) -> Path:
    """A new folder ``PARENT/PREFIXxxxxxxxxxxxx`` with a plain ``mkdir``'s permissions (the umask's).

    For a folder that is filled, then renamed into place as the result (a dataset, a cache entry):
    :func:`tempfile.mkdtemp` makes it 0700, so a shared data folder's dataset would be readable by
    whoever fetched it alone.
    """
    for _ in range(100):
        path = parent / f"{prefix}{os.urandom(6).hex()}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"cannot make a {prefix}* folder in {parent}: every name drawn was taken")


def names_folder(output: str | os.PathLike[str]) -> bool:
    """Whether an output file path a user typed names a folder by its spelling: a trailing separator, or a last component
    ``.`` / ``..``. ``Path()`` drops both (``Path("new/")`` is ``new``), so ``-o new/`` wrote a file ``new`` (or
    ``new.png``) beside the folder meant, when ``new`` did not exist yet; an existing folder is ``Path.is_dir``'s."""
    raw = os.fspath(output)
    return raw.endswith(("/", os.sep)) or os.path.basename(raw) in (".", "..")


def home_path(value: str) -> str:
    """An output path a user typed, ``~`` read as the home folder: no shell expands it after ``=`` (``--out=~/r``), and
    such a path made a folder literally named ``~`` in the current one (as ``out_dir`` and ``data_dir`` do: RunConfig)."""
    return os.path.expanduser(value)

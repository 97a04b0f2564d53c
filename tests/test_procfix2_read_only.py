"""An output folder on a read-only file system (a container's read-only bind mount, a cluster's read-only share) is
named as such: it read "... is not writable by this user", which sent the user to chmod, where no permission helps.

No read-only mount can be made in a test (root, or not, in a container): the file system's flags and the access
check are stood in for; the real statvfs flag is what :func:`chillfl.paths._read_only` reads.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from chillfl import paths
from chillfl.errors import ConfigError
from chillfl.paths import check_writable_dir


def _statvfs(read_only: bool) -> object:
    real = os.statvfs

    def statvfs(path: object) -> object:
        got = real(path)  # type: ignore[arg-type]
        return SimpleNamespace(f_flag=(got.f_flag | os.ST_RDONLY) if read_only else (got.f_flag & ~os.ST_RDONLY))

    return statvfs


def test_a_read_only_file_system_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths.os, "access", lambda *a, **k: False)  # what access(W_OK) says there (EROFS), root included
    monkeypatch.setattr(paths.os, "statvfs", _statvfs(True))
    with pytest.raises(ConfigError) as caught:
        check_writable_dir(str(tmp_path / "out"), "out_dir")
    assert str(caught.value) == f"out_dir: {tmp_path} is on a read-only file system"


def test_a_folder_this_user_cannot_write_is_still_said_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paths.os, "access", lambda *a, **k: False)
    monkeypatch.setattr(paths.os, "statvfs", _statvfs(False))
    with pytest.raises(ConfigError) as caught:
        check_writable_dir(str(tmp_path / "out"), "out_dir")
    assert str(caught.value) == f"out_dir: {tmp_path} is not writable by this user"


def test_erofs_when_creating_the_probe_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """root on some mounts: access says yes, the write itself fails with EROFS."""

    def mkdtemp(*a: object, **k: object) -> str:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    with pytest.raises(ConfigError) as caught:
        check_writable_dir(str(tmp_path), "out_dir")
    assert str(caught.value) == f"out_dir: {tmp_path} is on a read-only file system"

"""A tar unpacked on a Python without tarfile's data filter (3.10.0-3.10.11, 3.11.0-3.11.3, which pyproject allows):
``extractall(filter=...)`` was a TypeError there, a traceback after the download had finished."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

import pytest

from chillfl.data.download import unpack_tar


def _tar(path: Path) -> None:
    with tarfile.open(path, "w:gz") as tar:
        body = b"1,2,3\n"
        info = tarfile.TarInfo("set/data.csv")
        info.size, info.mode, info.uid, info.uname = len(body), 0o4777, 4242, "nobody-here"  # setuid, world-writable
        tar.addfile(info, io.BytesIO(body))


def test_a_tar_unpacks_without_the_data_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "a.tar.gz"
    _tar(archive)
    real = tarfile.TarFile.extractall

    def old_extractall(self: tarfile.TarFile, path: Any = ".", members: Any = None, *, numeric_owner: bool = False) -> None:
        real(self, path, members, numeric_owner=numeric_owner, filter="fully_trusted")  # as 3.10.11 did: no filter argument

    monkeypatch.delattr(tarfile, "data_filter")
    monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    unpack_tar(archive, tmp_path / "out")
    done = tmp_path / "out" / "set" / "data.csv"
    assert done.read_bytes() == b"1,2,3\n"
    mode = stat.S_IMODE(done.stat().st_mode)
    assert not mode & (stat.S_ISUID | stat.S_IWGRP | stat.S_IWOTH) and mode & stat.S_IRUSR  # as the data filter leaves it
    assert done.stat().st_uid == os.getuid()

"""A run folder's lock on a file system without file locks (NFS without its lock service: ENOLCK; Lustre mounted
without flock: ENOSYS, EOPNOTSUPP) is refused for that reason, in one line naming the folder, exit 2. Before, any
error of ``flock`` read "... is in use by another chillfl process", so every run there was refused with a false reason.
Only a lock another process holds (EWOULDBLOCK) is "in use".
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from chillfl.cli import main
from chillfl.errors import ConfigError
from chillfl.storage import results
from chillfl.storage.results import FolderInUse, LocksUnsupported, RunLock


def _flock_failing(monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    """``flock`` as results.py calls it fails with ``code`` (this module's fcntl only: nothing else in the process)."""

    def flock(fd: int, op: int) -> None:
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(results, "fcntl", SimpleNamespace(LOCK_SH=fcntl.LOCK_SH, LOCK_EX=fcntl.LOCK_EX, LOCK_NB=fcntl.LOCK_NB, flock=flock))


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL])
def test_a_file_system_without_locks_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    _flock_failing(monkeypatch, code)
    with pytest.raises(LocksUnsupported) as caught:
        RunLock(tmp_path)
    assert not isinstance(caught.value, FolderInUse)
    assert isinstance(caught.value, ConfigError) and caught.value.field == "run_dir"
    assert f"the file system of {tmp_path} does not support file locks" in str(caught.value)
    assert "in use" not in str(caught.value)


def test_a_held_lock_is_still_in_use(tmp_path: Path) -> None:
    held = RunLock(tmp_path)
    try:
        with pytest.raises(FolderInUse, match="is in use by another chillfl process"):
            RunLock(tmp_path)
    finally:
        held.release()
    RunLock(tmp_path).release()


CONFIG = """\
name = "nolock"
seed = 1
threads = 1
device = "cpu"
out_dir = "{out}"
[dataset]
name = "digits"
[model]
name = "mlp"
hidden = [8]
[federation]
num_clients = 4
clients_per_round = 2
rounds = 1
[client]
epochs = 1
batch_size = 32
lr = 0.05
[eval]
client_split_size = 20
"""


def test_run_on_a_folder_without_locks_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "nolock.toml"
    config.write_text(CONFIG.format(out=tmp_path / "out"))
    _flock_failing(monkeypatch, errno.ENOLCK)
    assert main(["run", str(config), "-q"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1, err
    assert "does not support file locks" in err[0] and str(tmp_path / "out") in err[0] and "in use" not in err[0], err


def test_a_data_cache_on_a_file_system_without_locks_is_read_not_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached dataset under a ``data_dir`` whose file system refuses ``flock`` (an NFS home without its lock service)
    is served from its entry: the refusal was taken as "the entry is being removed", a miss, so every run decoded it again."""
    import numpy as np

    from chillfl.data.arraycache import Decoded, cached

    source = tmp_path / "src"
    source.mkdir()
    (source / "data.bin").write_bytes(b"x")
    decodes: list[int] = []

    def decode() -> Decoded:
        decodes.append(1)
        return Decoded(np.zeros((4, 1, 2, 2), np.float32), np.arange(4) % 2, np.zeros((2, 1, 2, 2), np.float32), np.arange(2) % 2, 2)

    cached("toy", {}, source, tmp_path, decode, output_version=1)
    _flock_failing(monkeypatch, errno.ENOLCK)
    assert len(cached("toy", {}, source, tmp_path, decode, output_version=1).y_train) == 4
    assert len(decodes) == 1

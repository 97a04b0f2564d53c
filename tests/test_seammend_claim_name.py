"""A claim that fails names the ``.partial`` folder it would have made: ``NAME-2.partial`` when ``NAME`` is taken.

Before, a run or temperature sweep beside a finished one of the same name (which takes the next free ``NAME-N``) named
``NAME.partial`` in its error: the user's other run's folder, not the one that could not be made.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from chillfl.storage.results import FolderInUse, LocksUnsupported, ResultWriter, claim_dir

from test_claimfix_claim import sweep_on_a_full_disk
from test_procfix2_locks import _flock_failing


def test_a_run_beside_a_finished_one_names_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "run").mkdir()  # a finished run of the name: this one would be run-2
    (tmp_path / "run-2.partial").mkdir()  # and another going on: run-3
    _flock_failing(monkeypatch, errno.ENOLCK)
    with pytest.raises(LocksUnsupported) as caught:
        ResultWriter(tmp_path, "run")
    assert caught.value.field == "out_dir"
    assert caught.value.message.startswith(f"the file system of {tmp_path / 'run-3.partial'} does not support file locks")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "run-2.partial"]


def test_a_temperature_sweep_beside_a_finished_one_names_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ts-temperature-sweep").mkdir()
    assert sweep_on_a_full_disk(tmp_path, monkeypatch).message == f"cannot create {tmp_path / 'ts-temperature-sweep-2.partial'}: its config.toml: {os.strerror(errno.ENOSPC)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ts-temperature-sweep"]


def test_an_exact_claim_names_its_one_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A comparison's run never moves to ``NAME-N``: its error names ``NAME.partial``, taken or not."""
    (tmp_path / "cell").mkdir()
    _flock_failing(monkeypatch, errno.ENOLCK)
    with pytest.raises(LocksUnsupported) as caught:
        claim_dir(tmp_path, "cell", lambda folder: None, exact=True)
    assert f"{tmp_path / 'cell.partial'} does not" in caught.value.message
    assert not isinstance(caught.value, FolderInUse)

"""Mends after today's review (rev110a) of the one claim for every results folder.

A temperature sweep's folder, claimed locked since the claims were made one, was refused on a file system without file
locks after all its training (it had worked there: nothing resumes or shares a sweep); a comparison's first file that
could not be written was named by ``write_atomic``'s temporary file (``config.toml.tmp``); and an aggregator passed
from Python to a ``[prototypes]`` run was refused on ``algorithm.name`` ("got 'custom'"), a field the caller never set.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import chillfl
import chillfl.analysis.temperature_sweep as tsweep
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.extend import FedAvg
from chillfl.storage.checkpoint import write_atomic
from chillfl.storage.results import LocksUnsupported, claim_dir

from test_procfix2_locks import _flock_failing


def test_a_temperature_sweep_is_written_on_a_file_system_without_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(None, {"name": "ts", "out_dir": str(tmp_path), "dataset.name": "digits"})
    _flock_failing(monkeypatch, errno.ENOLCK)
    monkeypatch.setattr(tsweep, "_fill", lambda partial, *args: (partial / "correlation.md").write_text("-\n"))  # no training, no figures
    folder = tsweep._write(config, None, "mean")  # type: ignore[arg-type]
    assert folder == tmp_path / "ts-temperature-sweep"
    assert sorted(p.name for p in folder.iterdir()) == ["config.toml", "correlation.md"]


def test_a_locked_claim_on_such_a_file_system_is_still_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _flock_failing(monkeypatch, errno.ENOLCK)
    with pytest.raises(LocksUnsupported):
        claim_dir(tmp_path, "run", lambda folder: (folder / "a").write_text("a"))
    assert list(tmp_path.iterdir()) == []


def test_a_first_file_written_atomically_is_named_as_itself_not_its_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened = os.open

    def refused(path: str | os.PathLike[str], *args: int, **kwargs: int) -> int:
        if str(path).endswith("config.toml.tmp"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return opened(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refused)
    with pytest.raises(ConfigError) as caught:
        claim_dir(tmp_path, "c-compare", lambda folder: write_atomic(folder / "config.toml", b"a = 1\n"))
    assert caught.value.field == "out_dir"
    assert caught.value.message == f"cannot create {tmp_path / 'c-compare.partial'}: its config.toml: {os.strerror(errno.EACCES)}"
    assert list(tmp_path.iterdir()) == []


def test_an_aggregator_passed_to_a_prototypes_run_is_refused_on_aggregator() -> None:
    config = {"name": "p", "dataset": {"name": "digits"}, "model": {"name": "mlp"}, "prototypes": {"method": "fedproto"},
              "federation": {"num_clients": 3, "clients_per_round": 3, "rounds": 1}, "client": {"epochs": 1, "batch_size": 32}}
    with pytest.raises(ConfigError) as caught:
        chillfl.run(config=config, write=False, progress=False, aggregator=FedAvg())
    assert caught.value.field == "aggregator"
    assert caught.value.message == ("[prototypes] trains with its method's own objective and averages models with its own fedavg; "
                                    "pass no aggregator")

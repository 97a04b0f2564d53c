"""One claim for every folder of results (claimfix): a run's, a comparison's and a temperature sweep's folder appear under
their name locked and not empty (``claim_dir``), and a claim that fails names the folder the user asked for.

Finding 1: a run's claim is made under a hidden ``.claim-PID-HEX`` folder; its errors (no file locks, a ``metrics.jsonl``
that cannot be made) named that folder, on ``run_dir`` or on no field, not ``NAME.partial`` in ``out_dir``.
Finding 2: a comparison's and a temperature sweep's folder were made empty under their name (``mkdir``) and locked
after, or never: a shard of the comparison started at that instant renamed its own folder onto the empty one (a rename
replaces an empty folder), and then the comparison, refused its lock, removed the shard's folder.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import chillfl.analysis.temperature_sweep as tsweep
import chillfl.storage.results as results
import chillfl.sweeps.run as sweeps_run
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.errors import ConfigError
from chillfl.storage.results import FolderInUse, LocksUnsupported, ResultWriter, RunLock
from chillfl.sweeps.record import SWEEP_FILE, comparison_toml, sweep_record
from chillfl.sweeps.shard import Shard, hold_folder, join_folder

from test_folder_opening import _plan  # config "cmp" in OUT = tmp/out, a grid of 2 lr values: 2 runs
from test_procfix2_locks import CONFIG, _flock_failing

LOCKS = ("does not support file locks (flock: No locks available), which chillfl takes on a folder so that no two "
         "processes write it at once: use a folder on one that does (a local disk, NFS with its lock service, Lustre "
         "mounted with -o flock)")


# ----------------------------------------------------------------------------- finding 1: the line names the folder


def test_a_claim_without_file_locks_names_the_run_folder_on_out_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It said ``run_dir: the file system of OUT/.claim-123-abcdef does not support file locks``."""
    _flock_failing(monkeypatch, errno.ENOLCK)
    with pytest.raises(LocksUnsupported) as caught:
        ResultWriter(tmp_path, "run")
    assert caught.value.field == "out_dir"
    assert caught.value.message == f"the file system of {tmp_path / 'run.partial'} {LOCKS}"
    assert list(tmp_path.iterdir()) == []  # the hidden folder removed again


def test_a_metrics_file_that_cannot_be_made_names_the_run_folder_on_out_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It was a StorageError (no field) ``cannot open OUT/.claim-123-abcdef/metrics.jsonl: Permission denied``."""
    real = os.open

    def refusing(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if str(path).endswith("metrics.jsonl") and flags & os.O_CREAT:
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path, flags, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refusing)
    with pytest.raises(ConfigError) as caught:
        ResultWriter(tmp_path, "run")
    monkeypatch.undo()
    assert caught.value.field == "out_dir"
    assert caught.value.message == f"cannot create {tmp_path / 'run.partial'}: its metrics.jsonl: {os.strerror(errno.EACCES)}"
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_of_a_claim_without_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "nolock.toml"
    config.write_text(CONFIG.format(out=tmp_path / "out"))
    _flock_failing(monkeypatch, errno.ENOLCK)
    assert main(["run", str(config), "-q"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == [f"chillfl: error: out_dir: the file system of {tmp_path / 'out' / 'nolock.partial'} {LOCKS}"]


def test_a_comparison_claim_without_locks_is_refused_on_out_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison's folder took its lock itself, after ``mkdir``, and its line was on ``run_dir``."""
    config, plan = _plan(tmp_path)
    _flock_failing(monkeypatch, errno.ENOLCK)
    with pytest.raises(LocksUnsupported) as caught:
        sweeps_run.open_folder(config, plan, None, True, resumable=True)
    assert caught.value.field == "out_dir"
    assert caught.value.message == f"the file system of {tmp_path / 'out' / 'cmp-compare.partial'} {LOCKS}"
    assert list((tmp_path / "out").iterdir()) == []


# ----------------------------------------------------------------------------- finding 2: comparisons, temperature sweeps


def test_a_shard_that_comes_as_the_comparison_folder_appears_cannot_take_it_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard of the same comparison (``--shard 1/2``) joins the instant the comparison's claim returns. The folder
    was there empty and unlocked: the shard's rename replaced it and the shard held it (shared), then the comparison was
    refused its own lock and removed the shard's folder. Now the folder is whole and held: the shard is refused."""
    config, plan = _plan(tmp_path)
    toml = comparison_toml(config, plan)
    record = sweep_record(toml.encode(), plan, resumable=True)
    claim, shard, held = sweeps_run.claim_dir, Shard(1, 2), []
    refused: list[ConfigError] = []

    def then_a_shard_joins(*args: object, **kwargs: object) -> object:
        made = claim(*args, **kwargs)  # type: ignore[arg-type]
        try:
            final, partial = join_folder(tmp_path / "out", "cmp-compare", toml, record, shard)
            held.append(hold_folder(final, partial, record, shard))
        except ConfigError as exc:
            refused.append(exc)
        return made

    monkeypatch.setattr(sweeps_run, "claim_dir", then_a_shard_joins)
    try:
        where, lock = sweeps_run.open_folder(config, plan, None, True, resumable=True)
        assert lock is not None and where.partial == tmp_path / "out" / "cmp-compare.partial"
        assert not held and len(refused) == 1 and isinstance(refused[0], FolderInUse), (held, refused)
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cmp-compare.partial"]
        assert sorted(p.name for p in where.partial.iterdir()) == ["config.toml", SWEEP_FILE]
        with pytest.raises(FolderInUse):
            RunLock(where.partial, shared=True)
        lock.release()
    finally:
        for other in held:
            other.release()


def test_a_second_copy_of_a_comparison_claiming_at_once_is_a_separate_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other copy claims between this claim's look at ``cmp-compare`` and its rename onto it: as a second run of a
    name, this one is ``cmp-compare-2``, a comparison of its own (what ``reproduce --resume`` looks up), never the
    other's folder; both are whole and held, and no hidden claim is left."""
    config, plan = _plan(tmp_path)
    taken, other = results._taken, []

    def check_then_other_claims(final: Path) -> bool:
        found = taken(final)
        if not other:
            monkeypatch.setattr(results, "_taken", taken)
            other.append(sweeps_run.open_folder(config, plan, None, True, resumable=True))
        return found

    monkeypatch.setattr(results, "_taken", check_then_other_claims)
    where, lock = sweeps_run.open_folder(config, plan, None, True, resumable=True)
    try:
        assert other and other[0][0].partial == tmp_path / "out" / "cmp-compare.partial"
        assert where.partial == tmp_path / "out" / "cmp-compare-2.partial" and where.folder == tmp_path / "out" / "cmp-compare-2"
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["cmp-compare-2.partial", "cmp-compare.partial"]
        for folder in (where.partial, other[0][0].partial):
            assert sorted(p.name for p in folder.iterdir()) == ["config.toml", SWEEP_FILE]
            with pytest.raises(FolderInUse):
                RunLock(folder)
    finally:
        for held in [lock, *(o[1] for o in other)]:
            if held is not None:
                held.release()


def test_a_temperature_sweep_folder_appears_locked_and_not_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The instant the sweep's folder has its name, another process finds it held and holding its ``config.toml``. It was
    made there empty and never locked: another claim's rename (which replaces an empty folder) could take it over."""
    config = load_config(None, {"name": "ts", "out_dir": str(tmp_path), "dataset.name": "digits"})
    claim, seen = tsweep.claim_dir, []

    def looked_at_once(*args: object, **kwargs: object) -> object:
        made = claim(*args, **kwargs)  # type: ignore[arg-type]
        partial = tmp_path / "ts-temperature-sweep.partial"
        seen.append(sorted(p.name for p in partial.iterdir()))
        with pytest.raises(FolderInUse):
            RunLock(partial).release()
        return made

    monkeypatch.setattr(tsweep, "claim_dir", looked_at_once)
    monkeypatch.setattr(tsweep, "_fill", lambda partial, *args: (partial / "correlation.md").write_text("-\n"))  # no training, no figures
    folder = tsweep._write(config, None, "mean")  # type: ignore[arg-type]
    assert seen == [["config.toml"]]
    assert folder == tmp_path / "ts-temperature-sweep" and sorted(p.name for p in tmp_path.iterdir()) == ["ts-temperature-sweep"]
    assert sorted(p.name for p in folder.iterdir()) == ["config.toml", "correlation.md"]
    RunLock(folder).release()  # released once whole


def sweep_on_a_full_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ConfigError:
    """The error of a temperature sweep "ts" written into ``tmp_path`` whose first file (config.toml) meets a full disk."""
    config = load_config(None, {"name": "ts", "out_dir": str(tmp_path), "dataset.name": "digits"})

    def full(folder: Path, config: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder / "config.toml"))

    monkeypatch.setattr(tsweep, "_write_config", full)
    with pytest.raises(ConfigError) as caught:
        tsweep._write(config, None, "mean")  # type: ignore[arg-type]
    return caught.value


def test_a_temperature_sweep_that_cannot_write_its_config_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its first file fails (a full disk): one line on out_dir naming the sweep's folder, nothing left behind."""
    error = sweep_on_a_full_disk(tmp_path, monkeypatch)
    assert error.field == "out_dir"
    assert error.message == f"cannot create {tmp_path / 'ts-temperature-sweep.partial'}: its config.toml: {os.strerror(errno.ENOSPC)}"
    assert list(tmp_path.iterdir()) == []


def test_a_temperature_sweep_whose_name_was_taken_meanwhile_moves_to_the_next_free_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another sweep of the name finished while this one ran: its folder (not empty) is left as it is and this one takes
    ``-2``, as a run does (:func:`~chillfl.storage.results.rename_free`); a plain rename failed with the system's error."""
    config = load_config(None, {"name": "ts", "out_dir": str(tmp_path), "dataset.name": "digits"})

    def finished_beside(partial: Path, *args: object) -> None:
        (partial / "correlation.md").write_text("mine\n")
        other = tmp_path / "ts-temperature-sweep"
        other.mkdir()
        (other / "correlation.md").write_text("theirs\n")

    monkeypatch.setattr(tsweep, "_fill", finished_beside)
    folder = tsweep._write(config, None, "mean")  # type: ignore[arg-type]
    assert folder == tmp_path / "ts-temperature-sweep-2"
    assert (folder / "correlation.md").read_text() == "mine\n"
    assert (tmp_path / "ts-temperature-sweep" / "correlation.md").read_text() == "theirs\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ts-temperature-sweep", "ts-temperature-sweep-2"]

"""A run's folder is claimed and locked in one step (claimrace finding 1).

``claim_dir`` made ``NAME.partial`` and the run locked it only after: two copies of one comparison's shard started
together (a requeued cluster job racing its original) both found the run not started, and then one took ``NAME.partial``
and the other ``NAME-2.partial``, and both ran it; or one found the other's new folder not yet locked and removed it as
a run abandoned before its first checkpoint. Now a run's folder appears under its name already locked, and a comparison's
run has that name or none: the copy that comes second is refused in the one line a held folder always gave.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import chillfl.storage.results as results
import chillfl.sweeps.run as sweeps_run
from chillfl.storage.results import FolderInUse, ResultWriter, RunLock
from chillfl.sweeps.resume import stopped_run

from test_sweep_shard import _config, _run  # the shard tests' comparison: 2 variants x 2 seeds, 2 rounds


def test_a_duplicate_shard_that_comes_second_to_a_run_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The two copies interleaved: both find ``b-s0`` not started (:func:`stopped_run`), the other one claims it, then
    this one tries. It ran it again in ``b-s0-2.partial`` and exited 0."""
    config = _config(tmp_path)
    partial = tmp_path / "sh-compare.partial"
    other: list[ResultWriter] = []

    def then_the_other_claims(folder: Path, name: str) -> Path | None:
        found = stopped_run(folder, name)
        if name == "b-s0":
            other.append(ResultWriter(folder, name))  # the other copy, a step ahead: its claim (and lock) of the run
        return found

    monkeypatch.setattr(sweeps_run, "stopped_run", then_the_other_claims)
    try:
        assert _run(config, tmp_path, "--shard", "1/2") == 2
        held = partial / "b-s0.partial"
        assert other and other[0].path == held
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == f"chillfl: error: run_dir: {held} is in use by another chillfl process (a run or resume of it is going on)", err
        assert (held / "metrics.jsonl").read_bytes() == b""  # the other copy's folder, untouched
        assert sorted(p.name for p in partial.iterdir() if p.name.startswith("b-s0")) == ["b-s0.partial"]  # no b-s0-2: run once
        assert not [p for p in partial.iterdir() if p.name.startswith(".claim-")]
    finally:
        for writer in other:
            writer.abort()


def test_of_two_claims_of_a_comparison_run_at_once_one_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The other copy claims the run's folder between this claim's look at the name and its rename onto it: one gets
    ``cell.partial``, the other is refused (never ``cell-2.partial``), and no hidden folder of a claim is left behind.
    (A check-then-create claim took the name twice here, or moved on to ``cell-2``.)"""
    taken, other = results._taken, []

    def check_then_other_claims(final: Path) -> bool:
        found = taken(final)
        if not other:
            monkeypatch.setattr(results, "_taken", taken)
            other.append(ResultWriter(tmp_path, "cell", exact=True))
        return found

    monkeypatch.setattr(results, "_taken", check_then_other_claims)
    try:
        with pytest.raises(FolderInUse):
            ResultWriter(tmp_path, "cell", exact=True)
        assert other and other[0].path == tmp_path / "cell.partial"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["cell.partial"]
    finally:
        for writer in other:
            writer.abort()


def test_a_new_run_folder_is_never_seen_unlocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process that looks in while this one claims (between the folder's making and its lock) finds nothing to
    remove. It found ``NAME.partial`` unlocked and without a checkpoint, removed it as abandoned, and this claim failed
    (or, had the other made it again meanwhile, this one would have locked the other's folder)."""
    lock = results.RunLock
    looked: list[Path | None] = []

    def looked_in_first(folder: Path, *args: object, **kwargs: object) -> RunLock:
        if not looked:
            looked.append(stopped_run(tmp_path, "cell"))  # a duplicate's look at the run, in this claim's window
            assert folder.is_dir()  # the folder being locked survived the look
            assert not (tmp_path / "cell.partial").exists()  # nothing under the run's name before it is locked
        return lock(folder, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(results, "RunLock", looked_in_first)
    writer = ResultWriter(tmp_path, "cell")
    try:
        assert looked == [None]
        assert writer.path == tmp_path / "cell.partial" and (writer.path / "metrics.jsonl").is_file()
        with pytest.raises(FolderInUse):  # held from the moment it has its name
            lock(writer.path)
    finally:
        writer.abort()


def test_a_separate_run_still_moves_to_the_next_free_name(tmp_path: Path) -> None:
    """Not a comparison's run: two of one name at once still get ``NAME`` and ``NAME-2`` (claim_dir's search), both held."""
    first, second = ResultWriter(tmp_path, "run"), ResultWriter(tmp_path, "run")
    try:
        assert (first.path.name, second.path.name) == ("run.partial", "run-2.partial")
        for writer in (first, second):
            with pytest.raises(FolderInUse):
                RunLock(writer.path)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["run-2.partial", "run.partial"]
    finally:
        first.abort()
        second.abort()

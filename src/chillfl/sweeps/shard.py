"""One comparison's runs split over several processes or machines (``chillfl run CONFIG --shard K/N``).

A cluster's array job starts N copies of one command, each with its own K::

    chillfl run experiment.toml --shard $SLURM_ARRAY_TASK_ID/4     # K = 1..4

Every shard plans the whole comparison, runs the runs ``i`` with ``i % N == K - 1``, and writes them into one
shared folder, ``OUT_DIR/NAME-compare.partial`` (a filesystem every shard sees): the first to start makes it,
the others join it when its ``sweep.json`` is theirs (same config, variants, seeds, tuning, code and torch;
anything else is refused, so two different comparisons never mix). A shard restarted after a crash reads its
finished runs back and resumes the stopped one, as ``chillfl resume`` does.

While they run, the shards hold a shared lock on the folder; the last one to end, finding every run finished,
writes the table as ``chillfl resume OUT_DIR/NAME-compare.partial`` would (the same numbers as one process
running the comparison, bit for bit on one machine and torch build). If a shard failed, that command, run once
the others have ended, runs what is missing and writes the table.

A shard restarted by hand while the last one renames the folder to ``NAME-compare`` (holding the folder's
exclusive lock) does nothing and says the comparison is finished: it checks for ``NAME-compare`` again once its
own folder is in place (:func:`join_folder`) and once it holds the shared lock (:func:`hold_folder`), so it never
makes a new ``.partial`` beside the finished folder or runs its cells again. The same holds, at the same points,
when every run failed and the last shard renamed the folder ``NAME-compare.failed``: a shard restarted then or
after says so and runs nothing (:func:`refuse_ended`; a ``.failed`` folder of another comparison stops nothing).
"""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from chillfl.errors import ConfigError, json_loads
from chillfl.stop_signals import made_held
from chillfl.storage.results import FAILED, PARTIAL, FolderInUse, RunLock, remove_tree
from chillfl.sweeps.record import SWEEP_FILE, SweepRecord, sweep_difference, write_sweep

FIELD = "shard"
_SHARD = re.compile(r"^\s*(\d{1,6})\s*/\s*(\d{1,6})\s*$")


@dataclass(frozen=True)
class Shard:
    """This process's share of a comparison's runs: the ``index``-th of ``count`` (1-based, as array job ids are)."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: object) -> Shard:
        """``"K/N"`` with 1 <= K <= N; anything else (``chillfl.compare(shard=2)`` too) is a ConfigError on ``shard``."""
        found = _SHARD.match(text) if isinstance(text, str) else None
        if found is None:
            raise ConfigError(FIELD, f"give K/N (this process runs the K-th of N shares, 1 <= K <= N), got {text!r}")
        index, count = int(found[1]), int(found[2])
        if not 1 <= index <= count:
            zero = " (K is 1-based: from a 0-based SLURM_ARRAY_TASK_ID give $((SLURM_ARRAY_TASK_ID+1))/N, or #SBATCH --array=1-N)" if index == 0 else ""
            raise ConfigError(FIELD, f"K/N needs 1 <= K <= N, got {index}/{count}{zero}")
        return cls(index, count)

    def takes(self, i: int) -> bool:
        """Whether the ``i``-th run of the comparison (0-based, in plan order) is this shard's."""
        return i % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


class ComparisonFinished(ConfigError):
    """The comparison's table is written (``folder``): a shard started now has nothing to run. Not an error of the shard's
    (a requeued array job ends here): :func:`~chillfl.sweeps.run.run_shard` says so in one line and ends as done."""

    def __init__(self, folder: Path, shard: Shard) -> None:
        self.folder = folder
        super().__init__(FIELD, f"{folder} is finished (its table is written): nothing is left for shard {shard}; "
                                "give another out_dir to run the comparison again")


def join_folder(parent: Path, name: str, config_toml: str, record: SweepRecord, shard: Shard) -> tuple[Path, Path]:
    """``(final, partial)``: the comparison's shared ``parent/name.partial``, made by the first shard, joined by the others.

    The first shard fills a private folder and renames it into place (atomic: a shard that joins never sees it half
    written); a shard that finds it there joins when its ``sweep.json`` equals ``record``.
    """
    final, partial = parent / name, parent / f"{name}{PARTIAL}"
    refuse_ended(final, record, shard)

    def private() -> Path:
        parent.mkdir(parents=True, exist_ok=True)
        made = parent / f".{name}.shard-{os.getpid()}-{secrets.token_hex(4)}"
        made.mkdir()
        return made

    try:
        made, held = made_held(private)  # a signal now waits until the private folder is in the hands of the removal below
    except OSError as exc:
        raise ConfigError("out_dir", f"cannot create a folder in {parent}: {exc.strerror or exc}") from None
    try:
        held.release()  # one that came meanwhile lands here: the private folder is removed again
        (made / "config.toml").write_text(config_toml, encoding="utf-8")
        write_sweep(made, record)
        try:
            os.rename(made, partial)  # fails when another shard's folder is there (it is never empty)
        except OSError:
            pass
        else:
            try:
                refuse_ended(final, record, shard)
            except ConfigError:
                made = partial  # the last shard renamed the folder after the check above: this one is removed again
                raise
            return final, partial
    finally:
        if made.exists():
            remove_tree(made)
    if partial.is_symlink() or not partial.is_dir():
        raise ConfigError(FIELD, f"{partial} is not a comparison folder; remove it or give another out_dir")
    if (differs := _difference(partial, record)) is not None:  # named: "another config ... or torch" left the user to guess which
        raise ConfigError(FIELD, f"{partial} holds another comparison (its {SWEEP_FILE} differs: {differs}); every shard must run the same "
                                 "command with the same code, or give each comparison its own out_dir")
    return final, partial


def _holds(folder: Path, record: SweepRecord) -> bool:
    """Whether ``folder``'s ``sweep.json`` is ``record`` (:func:`~chillfl.sweeps.record.same_sweep`: the folder each started in aside)."""
    return _difference(folder, record) is None


def _difference(folder: Path, record: SweepRecord) -> str | None:
    """What differs between ``folder``'s ``sweep.json`` and ``record`` (:func:`~chillfl.sweeps.record.sweep_difference`), or None."""
    try:
        saved = json_loads((folder / SWEEP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "it cannot be read"
    return sweep_difference(saved, record)


def refuse_ended(final: Path, record: SweepRecord, shard: Shard) -> None:
    """One line when the comparison has ended: ``final`` (its table is written), or ``final.failed`` (``final.failed-2``, ...
    where that was taken) holding this comparison (every run failed: the last shard renamed it so, and running its
    cells again fails the same way).

    A ``final.failed`` of another comparison under the same name (the lr that diverged, lowered) stops nothing.
    """
    if os.path.lexists(final):
        if final.is_dir() and not final.is_symlink() and (final / SWEEP_FILE).is_file() and not _holds(final, record):
            # a finished comparison of another config or grid under this name: "run the comparison again" misled
            raise ConfigError(FIELD, f"{final} is another comparison's, finished (its {SWEEP_FILE} differs: another config, variants, "
                                     "seeds, tuning, chillfl or torch): the shards share one folder, so give this comparison another "
                                     "out_dir or name")
        if final.is_dir() and not final.is_symlink() and _holds(final, record):  # this comparison's: done
            raise ComparisonFinished(final, shard)
        raise ConfigError(FIELD, f"{final} is finished (its table is written): nothing is left for shard {shard}; "
                                 "give another out_dir to run the comparison again")
    for failed in failed_folders(final):
        if failed.is_dir() and not failed.is_symlink() and _holds(failed, record):
            raise ConfigError(FIELD, f"{failed}: every run of this comparison failed: nothing is left for shard {shard}; "
                                     "change what made them fail, or give another out_dir to run it again")


def failed_folders(final: Path) -> list[Path]:
    """``final.failed`` and the ``final.failed-N`` beside it: the names an all-failed comparison of ``final`` is renamed to."""
    name = final.name + FAILED
    pattern = re.compile(re.escape(name) + r"(-[0-9]+)?")
    try:
        return sorted(p for p in final.parent.iterdir() if pattern.fullmatch(p.name))
    except OSError:  # no parent yet: nothing ended
        return []


def hold_folder(final: Path, partial: Path, record: SweepRecord, shard: Shard) -> RunLock:
    """The shared lock on the comparison's ``partial`` folder, which :func:`join_folder` found or made.

    The last shard renames the folder to ``final`` (or, every run failed, ``final.failed``) while it holds the
    exclusive lock: a shard joining at that moment finds the folder gone, or (its descriptor opened just before
    the rename) locks the renamed folder. Either way it is refused as ended (:func:`refuse_ended`), so that it
    writes no run into a ``partial`` made anew.
    """
    try:
        lock = RunLock(partial, shared=True)
    except FolderInUse:
        raise
    except ConfigError:
        refuse_ended(final, record, shard)
        raise
    try:
        refuse_ended(final, record, shard)  # renamed before the lock was had: no one renames it while it is held
    except ConfigError:
        lock.release()
        raise
    if not partial.is_dir():  # neither renamed by the last shard nor here: removed by hand meanwhile
        lock.release()
        raise ConfigError(FIELD, f"{partial} went away while shard {shard} joined it; start the shard again")
    return lock

"""One run's state read from its folder (finished, diverged, running, stopped, not started), for ``chillfl status``
and the HTML report's rows of unfinished runs; it imports no sweep code, so the report can use it. Only the folder is read:
whether a resume would refuse the run's ``partition.from`` file needs the config and the data, which sit above storage,
and is asked by both through :mod:`chillfl.partition_refusal`."""

from __future__ import annotations

import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from chillfl.errors import ConfigError, json_loads, one_line
from chillfl.numeric import is_real, is_whole
from chillfl.storage.checkpoint import CorruptCheckpoint, saved_round
from chillfl.storage.results import FAILED, PARTIAL, FolderInUse, RunLock
from chillfl.storage.run_folder import CHECKPOINT, SINK_FILES, SINK_FOLDERS, SWEEP_FILE, check_saved_files, is_sweep  # noqa: F401  (re-exported: where the report and status ask)
from chillfl.storage.run_folder import own_from_python

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


@dataclass(frozen=True)
class RunState:
    """One run's line: its name, state (``kind``: finished, diverged, running, stopped, not started; ``detail``), rounds
    written of those planned, and final global accuracy when finished."""

    name: str
    kind: str
    detail: str = ""
    rounds: int | None = None
    planned: int | None = None
    accuracy: float | None = None

    def cells(self) -> list[str]:
        """The table's cells; rounds past the planned ones (a run resumed with more rounds than its comparison planned,
        or whose ``config.toml`` was edited since) are said to be, not shown as ``5/3``."""
        if self.rounds is None:
            rounds = "-"
        elif not self.planned:
            rounds = str(self.rounds)
        elif self.rounds > self.planned:
            rounds = f"{self.rounds} (past the {self.planned} planned)"
        else:
            rounds = f"{self.rounds}/{self.planned}"
        state = f"{self.kind} ({self.detail})" if self.detail else self.kind
        # escaped (errors.one_line): a received folder named with ESC sequences (or a summary.json's stop reason) drove the terminal
        return [one_line(c) for c in (self.name, state, rounds, "-" if self.accuracy is None else f"{100 * self.accuracy:.2f}")]


def _regular(path: Path) -> bool:
    """Whether ``path`` is a regular file (through links): a FIFO there would block ``status`` forever, /dev/zero fill the memory."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _rounds_written(folder: Path) -> int:
    """The distinct rounds ``metrics.jsonl`` records (0 without it, or where it is no regular file)."""
    return _rounds_recorded(folder) or 0


def _rounds_recorded(folder: Path) -> int | None:
    """The distinct rounds ``metrics.jsonl`` records (None without it, or where it is no regular file or unreadable).

    Distinct round numbers, not lines: a round written twice (a run resumed by an older chillfl, which appended) counted
    twice, and ``status`` showed ``4/2`` for a run of two rounds. A line that is no round's record (garbled, no integer
    ``round`` >= 1) counts none; a last line without its newline is a round's record cut short by a kill (``chillfl
    resume`` drops it), not a round."""
    if not _regular(folder / "metrics.jsonl"):
        return None
    rounds: set[int] = set()
    try:
        with (folder / "metrics.jsonl").open("rb") as fh:
            for line in fh:
                if not line.endswith(b"\n") or not line.strip():
                    continue
                try:
                    record = json_loads(line)
                except ValueError:
                    continue
                number = record.get("round") if isinstance(record, dict) else None
                if is_whole(number) and number >= 1:
                    rounds.add(number)
    except OSError:
        return None
    return len(rounds)


def _locked(folder: Path) -> bool:
    """Whether a chillfl process holds ``folder``'s exclusive lock (a run going on)."""
    try:
        RunLock(folder, shared=True).release()
    except FolderInUse:
        return True
    except ConfigError:  # gone meanwhile (renamed when it finished)
        return False
    return False


def _refused(folder: Path) -> str | None:
    """Why ``chillfl resume`` would refuse the run in ``folder`` now, in a few words and with the way on; None: it resumes.

    The checks are resume's own (:func:`~chillfl.storage.run_folder.check_saved_files`: the checkpoint against its
    checksum, config.toml and metrics.jsonl against the checkpoint's record of them); only files are read, no model is
    built. Before, the checkpoint's header alone was read, and a torn checkpoint, or a config.toml or metrics.jsonl
    edited since, was shown as "resumes after round 12" while resume refused it."""
    again = "remove its folder and resume the comparison, which runs it again" if is_sweep(folder.parent) else "start the run again"
    for name in (CHECKPOINT, "config.toml", "metrics.jsonl", *SINK_FILES, *SINK_FOLDERS):  # a FIFO would block status forever: resume refuses it unopened
        try:
            mode = os.lstat(folder / name).st_mode
            odd = not (stat.S_ISDIR(mode) if name in SINK_FOLDERS else stat.S_ISREG(mode))
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"resume cannot read its {name}: {exc.strerror or exc}"
        if odd:
            return f"its {name} is no {'folder' if name in SINK_FOLDERS else 'regular file'}: resume refuses it"
    try:
        check_saved_files(folder)
    except CorruptCheckpoint:
        return f"checkpoint damaged: resume refuses it; {again}"
    except ConfigError as exc:
        if exc.field == "config.toml":
            if not _is_toml(folder / "config.toml"):
                return f"config.toml changed since the checkpoint and is no TOML: resume refuses it, --force too; {again}, or put its config back"
            return "config.toml changed since the checkpoint: resume needs --force"
        if exc.field == "metrics.jsonl":
            return "metrics.jsonl changed since the checkpoint (edited, cut or missing): resume needs --force"
        return f"resume refuses it ({exc.field})"
    except OSError as exc:  # a file gone or unreadable meanwhile
        return f"resume cannot read it: {exc.strerror or exc}"
    return None


def _is_toml(path: Path) -> bool:
    """Whether ``path`` reads as TOML (a config.toml that does not is refused by ``resume --force`` too)."""
    try:
        tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a leading BOM is dropped, as chillfl.config.read_toml drops it
    except (OSError, ValueError):  # UnicodeDecodeError and TOMLDecodeError are ValueErrors
        return False
    return True


def run_state(parent: Path, name: str, planned: int | None = None) -> RunState:
    """Run ``name``'s state from what ``parent`` holds of it (``NAME``, ``NAME.failed``, ``NAME.partial`` or nothing)."""
    done, failed, partial = parent / name, parent / f"{name}{FAILED}", parent / f"{name}{PARTIAL}"
    if (done / "summary.json").is_file():
        return folder_state(done, name, planned)
    for folder in (failed, partial, done):
        if folder.is_dir() and (folder is not failed or (failed / "failure.json").is_file()):
            return folder_state(folder, name, planned)
    return RunState(name, "not started", "", None, planned)


SINGLE_UNCHECKPOINTED = "before its first checkpoint: resume refuses it; run its config.toml again"
"""A single run's ``.partial`` without a checkpoint: ``chillfl resume`` has nothing to go on from (a comparison's such run, by
contrast, its resume runs again). It said "runs again" for both, true only inside a comparison."""


FINAL_WRITE_FAILED = ("after its last round, before its folder was complete (a final write failed or was cut short; no checkpoint to resume "
                      "from): run its config.toml again for a complete folder")
"""A single run's ``.partial`` holding a ``summary.json`` and no checkpoint: every round ran and a final write (the figures
on a full disk) failed, or the process was killed before the folder's rename, under ``checkpoint.every = 0`` (or before
2026-12-06, when the last round was not checkpointed); "before its first checkpoint" said the opposite of what happened."""


FINAL_WRITE_FAILED_IN_COMPARISON = "after its last round, before its folder was complete (no checkpoint to resume from): runs again"
""":data:`FINAL_WRITE_FAILED` for a comparison's run, which the comparison's resume runs again."""


SINGLE_UNCHECKPOINTED_FROM_PYTHON = "before its first checkpoint: resume refuses it; it ran on your own {own} from Python: start it again with chillfl.run(...)"
""":data:`SINGLE_UNCHECKPOINTED` for a run :func:`chillfl.run` made on the user's own model, data, aggregator or temperature
policy (``custom`` in its config.toml; ``{own}`` says which), as ``chillfl resume``'s line for it says: ``chillfl run`` of
that config.toml refuses it, since no config file rebuilds a part passed from Python."""


FINAL_WRITE_FAILED_FROM_PYTHON = ("after its last round, before its folder was complete (a final write failed or was cut short; no checkpoint to "
                                  "resume from): it ran on your own {own} from Python: start it again with chillfl.run(...) for a complete folder")
""":data:`FINAL_WRITE_FAILED` for a run made from Python (see :data:`SINGLE_UNCHECKPOINTED_FROM_PYTHON`)."""


def _own_parts(folder: Path) -> str | None:
    """What of the run in ``folder`` came from Python (``model``, ``model and data``, ...; None: nothing, or no readable
    config.toml), read only from a regular file: a FIFO there would block ``status`` forever."""
    return own_from_python(Path(os.path.abspath(folder))) if _regular(folder / "config.toml") else None


def _start_again(folder: Path, finished: bool) -> str:
    """A single run's ``.partial`` without a checkpoint (``finished``: every round ran, its ``summary.json`` is there): why
    it cannot be resumed and how to start it again, its config.toml or, for a run made from Python, ``chillfl.run``."""
    own = _own_parts(folder)
    if own is None:
        return FINAL_WRITE_FAILED if finished else SINGLE_UNCHECKPOINTED
    return (FINAL_WRITE_FAILED_FROM_PYTHON if finished else SINGLE_UNCHECKPOINTED_FROM_PYTHON).format(own=own)


def folder_state(folder: Path, name: str, planned: int | None = None) -> RunState:
    """The state of the one folder ``folder`` of run ``name``, told by its suffix (``.failed``, ``.partial``, none):
    ``chillfl status NAME.failed`` describes that folder, not a later run of the same name beside it.

    A link is read as its target (its own name has no suffix, and the lock cannot be taken through it), and a folder
    without a suffix and without ``summary.json`` but with a checkpoint or a held lock is a stopped or running run, as
    ``chillfl resume`` takes it (it goes on from that checkpoint): a copy renamed without ``.partial`` was called
    "finished (its summary.json is missing)" while ``resume`` of it ran on to the end."""
    folder = Path(os.path.realpath(folder))
    if folder.name.endswith(FAILED) or (not folder.name.endswith(PARTIAL) and _regular(folder / "failure.json")):  # a diverged run's copy
        # renamed without .failed keeps its failure.json, and resume refuses it as diverged (rev116e 3)
        try:
            at = json_loads((folder / "failure.json").read_text(encoding="utf-8")).get("round") if _regular(folder / "failure.json") else None
        except (OSError, ValueError, AttributeError):
            at = None
        return RunState(name, "diverged", f"at round {at}" if at is not None else "", _rounds_written(folder), planned)
    unfinished = not (folder / "summary.json").is_file() and ((folder / CHECKPOINT).is_file() or _locked(folder))
    if folder.name.endswith(PARTIAL) or unfinished:
        rounds = _rounds_written(folder)
        if _locked(folder):
            return RunState(name, "running", "", rounds, planned)
        finished = (folder / "summary.json").is_file()  # every round ran, a last write failed (checkpoint.every = 0)
        if is_sweep(folder.parent):  # the comparison's resume runs it again, as its own line says
            how = FINAL_WRITE_FAILED_IN_COMPARISON if finished else "before its first checkpoint: runs again"
        else:
            how = _start_again(folder, finished)
        if (folder / CHECKPOINT).is_file():  # its metrics may run past the checkpoint: those rounds run again
            done = saved_round(folder / CHECKPOINT)
            how = "resumes from its checkpoint" if done is None else f"resumes after round {done}, its checkpoint"
            if done is not None and (done < 0 or (planned is not None and done > planned)):  # re-signed or from another run: resume refuses it
                past = f", past the {planned} planned" if done >= 0 else ""
                how = f"its checkpoint is inconsistent: of round {done}{past}; resume refuses it"
            else:
                own = None if is_sweep(folder.parent) else _own_parts(folder)  # a comparison's run: resume_compare, as its own lines say
                how = _refused(folder) or (f"{how}: chillfl.resume(...) with your own {own} continues it" if own else how)
        return RunState(name, "stopped", how, rounds, planned)
    if (folder / "summary.json").is_file():
        try:
            summary = json_loads((folder / "summary.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = None
        if not isinstance(summary, dict):  # a damaged, hand-edited or foreign file: said so, the rounds from metrics.jsonl
            return RunState(name, "finished", "its summary.json is unreadable", _rounds_written(folder), planned)
        accuracy, ran = summary.get("final_global_acc"), summary.get("rounds")
        stopped = summary.get("stopped")
        if isinstance(stopped, dict):  # stopped by a callback: complete results, and resumable to the planned rounds
            how = "early, by a callback" + (f": {stopped['reason']}" if isinstance(stopped.get("reason"), str) else "")
            if (folder / CHECKPOINT).is_file():
                refused = _refused(folder)
                own = None if refused else _own_parts(folder)  # `chillfl resume` refuses a run on a part from Python
                how += f"; {refused}" if refused else f"; chillfl.resume(...) with your own {own} continues it" if own else "; `chillfl resume` continues it"
            return RunState(name, "stopped", how, ran if type(ran) is int else None, planned, accuracy if is_real(accuracy) else None)
        ran = ran if type(ran) is int else None
        recorded = _rounds_recorded(folder)
        if ran is not None and recorded is not None and recorded < ran:  # cut (a `resume --force` over a cut file): said, not shown whole
            return RunState(name, "finished", f"metrics.jsonl lacks {ran - recorded} of its rounds", recorded, planned,
                            accuracy if is_real(accuracy) else None)
        if recorded is None and os.path.lexists(folder / "metrics.jsonl"):  # a directory, a FIFO: read as a whole run before, while a cut one was said
            return RunState(name, "finished", "its metrics.jsonl cannot be read (or is no regular file)", ran, planned, accuracy if is_real(accuracy) else None)
        return RunState(name, "finished", "", ran, planned, accuracy if is_real(accuracy) else None)
    # No summary.json (missing, a directory, a FIFO): every run writes it before its folder gets its final name, a run a
    # callback stopped too (with `stopped`), so it was lost since. "stopped (early, by a callback)" was false, and the
    # resume it suggested refuses the folder (no checkpoint).
    lost = "is missing" if not os.path.lexists(folder / "summary.json") else "is no regular file"
    return RunState(name, "finished", f"its summary.json {lost}", _rounds_written(folder), planned)

"""What an interrupted comparison left of each run: ``chillfl resume results/NAME-compare.partial`` goes on from there.

Each run of a comparison is a run folder of its own, in one of four states,
which the resumed sweep (:class:`chillfl.sweeps.run.Sweep`) reads:

* ``RUN`` (finished): its metrics and summary are read back, not rerun;
* ``RUN.failed``: it diverged; the sweep reports it as before (``failure.json``);
* ``RUN.partial`` with a checkpoint: it resumes from that checkpoint
  (:func:`chillfl.runner.resume_experiment`, bitwise as an uninterrupted run);
* ``RUN.partial`` without one, or no folder: it runs from the start.

So the resumed sweep's table equals the uninterrupted sweep's, bit for bit on
one machine (``tests/test_sweep_resume.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chillfl.errors import ConfigError, json_loads, one_line
from chillfl.runner import CLIENT_MODELS, MODEL, RunOutput
from chillfl.storage.model_file import read_client_models, read_model
from chillfl.storage.results import FAILED, FAILURE, PARTIAL, RunLock, read_metrics, remove_tree
from chillfl.storage.run_folder import CHECKPOINT, FIELD, SWEEP_FILE, executor_move, move_accepted, say_accepted, say_forced


@dataclass(frozen=True)
class DivergedBefore:
    """A run that diverged before the interruption (its ``failure.json``): it stays diverged."""

    round: int | None


def has_ended(partial: Path, name: str) -> bool:
    """Whether run ``name`` of the comparison in ``partial`` has ended (finished or diverged): :func:`finished_run`
    reads it back then; a shard asks it of every run, before the table can be written (:mod:`chillfl.sweeps.shard`)."""
    return (partial / name / "summary.json").is_file() or (partial / f"{name}{FAILED}" / FAILURE).is_file()


def finished_run(partial: Path, name: str, num_clients: int | None = None) -> RunOutput | DivergedBefore | None:
    """A resumed sweep's run ``name`` as it ended before: its output read back, its divergence, or None.

    A garbled ``summary.json``, ``metrics.jsonl`` or ``failure.json`` is one ConfigError naming it (it was a traceback); so is
    a ``NAME`` folder without its summary, which the run, run again, left beside it as ``NAME-2`` (``status`` then read the
    damaged one), and a ``NAME.failed`` folder without its ``failure.json``, which the run, run again and diverged, left
    beside it as ``NAME.failed-2``. ``num_clients``: the run's ``federation.num_clients``, so that a
    ``client_models.safetensors`` naming a client past them (a crafted file) is refused as it is read."""
    done, failed = partial / name, partial / f"{name}{FAILED}"
    if (done / "summary.json").is_file():
        summary = _json_object(done / "summary.json")
        model = read_model(done / MODEL) if (done / MODEL).is_file() else None
        clients = read_client_models(done / CLIENT_MODELS, num_clients=num_clients) if (done / CLIENT_MODELS).is_file() else {}
        try:
            records = read_metrics(done)
        except (OSError, ValueError) as exc:
            raise ConfigError(FIELD, f"{done / 'metrics.jsonl'} is unreadable ({type(exc).__name__}: {one_line(str(exc))}); remove {done} and it runs again") from None
        if not all(isinstance(r, dict) for r in records):
            raise ConfigError(FIELD, f"{done / 'metrics.jsonl'} holds a line that is not a round's record; remove {done} and it runs again")
        return RunOutput(done, records, summary, model, clients)
    if (failed / FAILURE).is_file():
        return DivergedBefore(_json_object(failed / FAILURE).get("round"))
    if done.is_dir() and not done.is_symlink():  # renamed NAME only once its summary was written: it was removed since, or is no file
        raise ConfigError(FIELD, f"{done} is a finished run's folder without its summary.json (or it is no regular file); remove {done} and it runs again")
    if failed.is_dir() and not failed.is_symlink():  # renamed NAME.failed only once its failure.json was written; run again, it diverged into NAME.failed-2
        raise ConfigError(FIELD, f"{failed} is a diverged run's folder without its {FAILURE} (or it is no regular file); remove {failed} and it runs again")
    return None


def _json_object(file: Path) -> dict[str, Any]:
    """The JSON object in ``file`` (a run's own), or one ConfigError naming it."""
    try:
        value = json_loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(FIELD, f"{file} is unreadable ({type(exc).__name__}: {one_line(str(exc))}); remove {file.parent} and it runs again") from None
    if not isinstance(value, dict):
        raise ConfigError(FIELD, f"{file} holds no JSON object; remove {file.parent} and it runs again")
    return value


def stopped_run(partial: Path, name: str) -> Path | None:
    """The run ``name``'s folder if it stopped with a checkpoint (to resume); one stopped before its first is removed.

    It is removed under its lock, taken without waiting: a folder without a checkpoint is also a run that another process
    (a duplicate of this shard, a requeued job whose first try lives on) is running and has not checkpointed yet.
    Removing it then let this process write into the folder the other one was finishing (a "finished" run with the
    other's metrics); now it is refused as the run with a checkpoint is (:class:`~chillfl.storage.results.FolderInUse`,
    one line naming the folder, exit 2)."""
    stopped = partial / f"{name}{PARTIAL}"
    if (stopped / CHECKPOINT).is_file():
        return stopped
    if stopped.is_dir() and not stopped.is_symlink():  # nothing to keep: it runs again from the start
        lock = RunLock(stopped)  # FolderInUse: another process runs it
        try:
            remove_tree(stopped)
        finally:
            lock.release()
    return None


def say_executor_move(partial: Path) -> None:
    """For a comparison resumed with ``--force``: the line a run's resume says of an edit of ``executor`` in its
    ``config.toml`` since it started (:func:`~chillfl.storage.run_folder.say_forced`: another float path, not bitwise; or
    :func:`~chillfl.storage.run_folder.say_accepted`). Why: ``--force`` skips the comparison's check of its config.toml, so
    a move from ``vectorized`` to ``sequential`` (or back) was taken without a word, while a run's resume warned."""
    try:
        saved = json_loads((partial / SWEEP_FILE).read_text(encoding="utf-8")).get("config_toml")
        current = (partial / "config.toml").read_bytes()
    except (OSError, ValueError, AttributeError):  # read_sweep has said what it could not read
        return
    move = executor_move(saved, current) if isinstance(saved, str) else None  # an older chillfl's sweep.json records no config
    if move_accepted(move):
        say_accepted(move, "the comparison started")
    elif move is not None:
        say_forced(move, "the comparison started")

"""What ``chillfl resume`` checks before it touches a run folder: one line for every way it can be unfit.

In order: the folder exists and is not finished (a run a hook stopped early,
``summary.json`` with ``stopped``, is complete yet resumable in place); no other process holds it
(:class:`~chillfl.storage.results.RunLock`); it holds no links; it has a
config and a checkpoint; the checkpoint matches its own checksum, and the
config and the metrics up to the checkpoint's round are the ones the
checkpoint was written with (the SHA-256 and length it recorded). An edit
is named (``config.toml: client.lr: 0.05 -> 0.5``); ``force`` accepts it and
resumes with the files as they now are. A torn last line after the
checkpoint's rounds is no edit: those rounds run again anyway. An edit of
``executor`` alone between executors of one float path (sequential,
processes, Ray: :data:`BITWISE_EXECUTORS`) needs no ``force``: not a bit of
the rest of the run changes (one note line); with ``force``, a move to
another float path (vectorized, auto) is said not to be bitwise.

What ``force`` may override is what the user changes on purpose: config.toml,
metrics.jsonl, a diverged run's ``failure.json``. It never overrides the
checkpoint's own checksum: bytes that do not match it are a torn or flipped
file, not an edit, and the run would go on from a state no round produced.
Such a checkpoint is refused in one line, with or without ``force``, before
anything is written: the run starts again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Mapping, TypeGuard

from chillfl.paths import PARTITION_FILE, check_writable_dir, read_own_file
from chillfl.plugins import is_custom
from chillfl.storage.checkpoint import CorruptCheckpoint, read_checkpoint
from chillfl.storage.results import FAILURE, PARTIAL, RunLock, decode_record, encode_record, refuse_links
from chillfl.errors import ConfigError, json_loads

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.safetensors"
MODEL = "model.safetensors"
CLIENT_MODELS = "client_models.safetensors"
FIELD = "run_dir"
SWEEP_FILE = "sweep.json"
"""What makes a folder a comparison's (:mod:`chillfl.sweeps.record` writes and reads it)."""
STARTED_IN: Final = "started_in"
"""The key, in a checkpoint's ``run`` metadata and in a comparison's ``sweep.json``, of the absolute folder the run or
comparison was started in: a resume typed in another folder reads its relative paths from there (:func:`start_folder`)."""


TEMPERATURE_SWEEP_FILE: Final = "temperature_sweep.json"
"""What makes a folder ``chillfl analyze temperature-sweep``'s (:mod:`chillfl.analysis.temperature_sweep` writes it).
Before 2026-12-04 it was ``sweep.json``, a comparison's name: such a folder also holds ``correlation.json``."""


def is_sweep(folder: Path) -> bool:
    """Whether ``folder`` is a comparison's folder (``chillfl resume`` then resumes the sweep, not one run)."""
    return (folder / SWEEP_FILE).is_file() and not is_temperature_sweep(folder)


def is_temperature_sweep(folder: Path) -> bool:
    """Whether ``folder`` is a temperature sweep's (also one an older chillfl wrote, whose table was ``sweep.json``)."""
    return (folder / TEMPERATURE_SWEEP_FILE).is_file() or ((folder / SWEEP_FILE).is_file() and (folder / "correlation.json").is_file())


def refuse_temperature_sweep(folder: Path, field: str = "run_dir") -> None:
    """One line for a temperature sweep's folder given where a run's or a comparison's is read. Why: it holds a
    ``config.toml`` (and, before its table was renamed, a ``sweep.json``), so it passed for a comparison: ``status`` failed
    on a KeyError, ``resume`` called it a finished comparison, ``analyze`` asked for its run folders."""
    if is_temperature_sweep(folder):
        raise ConfigError(field, f"{folder} is a temperature sweep's folder (`chillfl analyze temperature-sweep`), not a run's or a "
                                 f"comparison's: nothing in it resumes or replays; its results are correlation.md, {TEMPERATURE_SWEEP_FILE} and the figures")


@dataclass
class ResumePoint:
    """A checked, locked run folder: the checkpoint's round and the metrics up to it (records and their bytes)."""

    path: Path
    lock: RunLock
    done: int
    records: list[dict[str, Any]]
    metrics: bytes
    config: bytes
    edited: bool = False
    """``config.toml`` changed since the checkpoint (resumed with ``--force``): it is no longer the config the run started with."""
    started_in: Path | None = None
    """The folder the run was started in (:func:`start_folder`): its relative ``data_dir`` is read from there."""


def run_metadata(config: bytes, metrics_bytes: int, metrics_sha256: str, started_in: str | None = None) -> dict[str, Any]:
    """What a checkpoint records of its run folder, for :func:`open_for_resume` to compare, and the folder the run was
    started in (``started_in``, absolute; None: unknown), for a resume typed in another one (:func:`start_folder`)."""
    return {
        "config_sha256": hashlib.sha256(config).hexdigest(),
        "config_toml": config.decode("utf-8"),
        "metrics_bytes": metrics_bytes,
        "metrics_sha256": metrics_sha256,
        STARTED_IN: started_in,
    }


def start_folder(folder: Path, recorded: object) -> Path | None:
    """The folder the run or comparison in ``folder`` was started in: the one it ``recorded`` (its checkpoint's or
    ``sweep.json``'s :data:`STARTED_IN`), else, for a folder an older chillfl wrote, the one its relative ``out_dir``
    tells (``<there>/<out_dir>/<folder>``); None when neither says. A resume reads the run's relative paths from it
    (:meth:`chillfl.config.RunConfig.paths_from`), not from the folder it is typed in."""
    if isinstance(recorded, str) and os.path.isabs(recorded):
        return Path(recorded)
    return _started_in(Path(os.path.abspath(folder)))


def sweep_started_in(folder: Path) -> Path | None:
    """The folder the comparison in ``folder`` was started in (:func:`~chillfl.storage.run_folder.start_folder`: what its
    ``sweep.json`` records, else what its relative ``out_dir`` tells): its runs read their relative paths from there."""
    data = read_own_file(folder / SWEEP_FILE)  # a FIFO hung resume; a link out of the folder is no record of this one
    try:
        recorded = json_loads(data).get(STARTED_IN) if isinstance(data, bytes) else None
    except (ValueError, AttributeError):
        recorded = None
    return start_folder(folder, recorded)


def folder_named(folder: str | Path) -> Path:
    """``folder`` as a path with its own name: ``.`` (``chillfl resume .`` from inside it) or ``..`` made absolute,
    since whether it is a ``.partial`` and what it is renamed to are read from its name. Links are not followed."""
    path = Path(folder)
    return Path(os.path.abspath(path)) if path.name in ("", "..") else path


def open_for_resume(folder: str | Path, force: bool = False) -> ResumePoint:
    """Lock and check ``folder`` for resuming; ConfigError (one line) for anything unfit. Release ``lock`` when done."""
    path = folder_named(folder)
    refuse_temperature_sweep(path, FIELD)
    _refuse_finished(path)
    _refuse_diverged(path, force)
    lock = RunLock(path)
    try:
        refuse_links(path)
        _refuse_odd_files(path)
        # it is written into, and a .partial renamed in its parent at the end: a read-only one failed only then, every round run
        for folder in (path, path.parent) if path.name.endswith(PARTIAL) else (path,):
            check_writable_dir(str(folder), FIELD)
        if not (path / "config.toml").is_file():
            raise ConfigError(FIELD, f"{path} is not a chillfl run folder (no config.toml)")
        if not (path / CHECKPOINT).is_file():
            lost = lost_sweep(path)
            raise ConfigError(SWEEP_FILE, lost) if lost else ConfigError(FIELD, _no_checkpoint(path))
        saved = check_saved_files(path, force)
        move = saved.move
        if move_accepted(move):
            say_accepted(move, f"the checkpoint of round {saved.done}")
        elif move is not None and force:  # what reproducibility.md promises for any part that can move bits
            say_forced(move, f"the checkpoint of round {saved.done}")
        return ResumePoint(path, lock, saved.done, saved.records, saved.metrics, saved.config, saved.edited, start_folder(path, saved.run.get(STARTED_IN)))
    except BaseException:
        lock.release()
        raise


@dataclass(frozen=True)
class SavedFiles:
    """A run folder's checkpoint, config and metrics as :func:`check_saved_files` checked them."""

    done: int
    run: Mapping[str, Any]
    config: bytes
    edited: bool
    move: ExecutorMove | None
    metrics: bytes
    records: list[dict[str, Any]]


def check_saved_files(path: Path, force: bool = False) -> SavedFiles:
    """What a resume checks of the files in ``path`` (its checkpoint verified against its checksum, ``config.toml`` and
    ``metrics.jsonl`` against the checkpoint's record of them), read-only, without the lock: one ConfigError, as
    :func:`open_for_resume` raises it. ``chillfl status`` asks the same, so it never calls resumable a run resume refuses."""
    state, run = read_checkpoint(path / CHECKPOINT)  # verified, force or not: a corrupt checkpoint is no edit
    done = _round_of(state, path / CHECKPOINT)
    config = (path / "config.toml").read_bytes()
    edited = run.get("config_sha256") not in (None, hashlib.sha256(config).hexdigest())
    move = executor_move(run.get("config_toml", ""), config) if edited else None
    if move_accepted(move):
        edited = False
    if edited and not force:
        changes = config_changes(run.get("config_toml", ""), config)
        raise ConfigError("config.toml", f"{path / 'config.toml'} changed since the checkpoint of round {done}: {changes}; `chillfl resume --force` resumes with it as it is now")
    metrics, records = _metrics_until(path / "metrics.jsonl", run, done, force)
    return SavedFiles(done, run, config, edited, move, metrics, records)


SINK_FILES: Final = ("metrics.csv", "metrics_clients.csv", "mlflow-runs.json")
"""What the metric sinks (:mod:`chillfl.sinks`: ``CSV_FILE``, ``CLIENTS_CSV_FILE``, ``MLFLOW_RUNS``) replace or read in a run folder on resume,
named here: :mod:`chillfl.sinks` imports this package."""
SINK_FOLDERS: Final = ("tensorboard",)
"""The sinks' folders (``TENSORBOARD_DIR``): TensorBoard's writer makes it and writes its event files into it."""


def _refuse_odd_files(path: Path) -> None:
    """A file a resume reads or replaces that is something else: a FIFO ``metrics.jsonl`` blocked the resume forever,
    a directory ``partition.json`` failed it every round later as a storage error (exit 1) that named no fix. The sinks'
    outputs too: a FIFO ``metrics.csv`` blocked the resume in an ``open`` no signal ends (only SIGKILL did), a directory
    there, or a file or FIFO ``tensorboard``, was a traceback once the sinks started."""
    for name in ("config.toml", CHECKPOINT, "metrics.jsonl", PARTITION_FILE, FAILURE, "summary.json", MODEL, CLIENT_MODELS, *SINK_FILES, *SINK_FOLDERS):
        try:
            mode = os.lstat(path / name).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(name, f"cannot read {path / name}: {exc.strerror or exc}") from None
        folder = name in SINK_FOLDERS
        if stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode):
            continue
        what = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a file" if stat.S_ISREG(mode) else "not a regular file"
        if name in SINK_FILES or folder:  # a view of metrics.jsonl (or the sink's own record), made again by the resume
            kind = "folder" if folder else "file"
            raise ConfigError(name, f"{path / name} is {what}; a run folder's {name} is a {kind} its metric sink writes (remove it: the resume writes it again)")
        raise ConfigError(name, f"{path / name} is {what}; a run folder's {name} is a file (remove it, or put the run's file back)")


def lost_sweep(folder: Path) -> str | None:
    """The line for a comparison's folder without its ``sweep.json`` (it holds run folders, which no run's does), else None.

    Without the record of the runs it plans, a comparison was read as one run: ``status`` said "stopped (early, by a
    callback)", ``resume`` that it stopped before its first checkpoint."""
    try:
        child = next((c for c in sorted(folder.iterdir()) if not c.is_symlink() and c.is_dir() and (c / "config.toml").is_file()), None)
    except OSError:
        return None
    if child is None:
        return None
    without = f"whose {SWEEP_FILE} is not a regular file" if os.path.lexists(folder / SWEEP_FILE) else f"without its {SWEEP_FILE}"
    if not folder.name.endswith(PARTIAL) and (folder / "table.json").is_file():
        return (f"{folder} is a finished comparison (its table is written) {without}, the record of the runs it "
                "planned: its runs cannot be listed in plan order, and there is nothing to resume")
    # not `chillfl run` of its config.toml: an older chillfl's holds no [variants], seeds or grid the flags gave, so it makes one run
    return (f"{folder} is a comparison's folder (it holds the run {child.name}) {without}, the record of the runs "
            "it plans: its plan is gone, so where it stands cannot be told, nor can it resume; run the comparison again "
            "with the `chillfl compare` command that made it, into a new folder (or `chillfl compare` of its config.toml, "
            "where this chillfl records the flags; an older one's holds the file alone)")


def _no_checkpoint(path: Path) -> str:
    """Why ``path`` cannot resume, and the command that starts it again: the comparison's resume for one of its runs
    (it runs that one again in place), else ``chillfl run`` of its saved config, after which nothing in it is needed.

    The command works from any folder: its paths are absolute, and a config whose ``out_dir`` is relative (``results``)
    is run from the folder it was started in (``cd``), so its new folder lands beside this one and a relative
    ``data_dir`` or plugin module is found as before. Where that folder cannot be told, ``--out`` names this one's parent.
    """
    where = Path(os.path.abspath(path))
    finished = (path / "summary.json").is_file()  # every round ran, then a final write failed (figures on a full disk, checkpoint.every = 0)
    said = (f"{path} has no {CHECKPOINT}: every round ran, its summary.json and model hold their results, but its last write failed (e.g. the "
            "figures), and without a checkpoint it cannot be finished" if finished else
            f"{path} has no {CHECKPOINT}: the run stopped before its first checkpoint, so no round can be resumed")
    if is_sweep(path.parent):
        return f"{said}; `chillfl resume {shlex.quote(str(where.parent))}` runs it again as part of its comparison"
    state = "for a complete folder" if finished else f"{path} holds no trained state"
    if (own := own_from_python(where)) is not None:  # `chillfl run` of its config.toml refuses a user's own part
        return f"{said}; it ran on your own {own} from Python: start it again with chillfl.run(...) as before (into a new folder){' ' if finished else '; '}{state}"
    if finished:
        return f"{said}; start it again with `{_run_again(path)}` (into a new folder) {state}"
    return f"{said}; start it again with `{_run_again(path)}` (into a new folder); {state}: remove it once that run has started"


def own_from_python(folder: Path) -> str | None:
    """What of the run in ``folder`` came from Python (``model``, ``data``, an aggregator or a temperature policy instance:
    ``custom`` in its table), which no config file rebuilds; None: none, or an unreadable config.toml."""
    try:
        saved = tomllib.loads((folder / "config.toml").read_text(encoding="utf-8-sig"))
    except (OSError, ValueError):
        return None
    own = [what for what, table, key in (("model", "model", "name"), ("data", "dataset", "name"), ("aggregator", "algorithm", "name"),
                                         ("temperature policy", "temperature", "policy"))
           if isinstance(part := saved.get(table), Mapping) and is_custom(part.get(key))]  # not `custom_models:Net`, an import path
    return " and ".join(own) or None


def _run_again(path: Path) -> str:
    """The command that runs ``path``'s saved config again from the start (see :func:`_no_checkpoint`)."""
    where = Path(os.path.abspath(path))
    config = where / "config.toml"
    origin = _started_in(where)
    if origin is not None:
        return f"cd {shlex.quote(str(origin))} && chillfl run {shlex.quote(os.path.relpath(config, origin))}"
    return f"chillfl run {shlex.quote(str(config))} --out {shlex.quote(str(where.parent))}"


def _started_in(folder: Path) -> Path | None:
    """The folder a run was started in, when its config's ``out_dir`` is relative and ``folder`` (absolute) is
    ``<there>/<out_dir>/<run>``; None for an absolute ``out_dir``, an unreadable config, or a folder moved since."""
    try:
        out_dir = tomllib.loads((folder / "config.toml").read_text(encoding="utf-8-sig")).get("out_dir")
    except (OSError, ValueError):
        return None
    if not isinstance(out_dir, str) or not out_dir or os.path.isabs(out_dir):
        return None
    parts = Path(os.path.normpath(out_dir)).parts
    if ".." in parts:  # `../results`: which folder it was started in is not in the path
        return None
    above = folder.parent.parts
    if parts and above[len(above) - len(parts) :] != parts:
        return None
    return Path(*above[: len(above) - len(parts)])


def _round_of(state: Mapping[str, Any], file: Path) -> int:
    """The round a checkpoint's state was taken after; a checksum proves a file intact, not that it holds a run's state
    (one written by hand, or by an older chillfl without a checksum), so its shape is checked here, not met as a KeyError later."""
    done = state.get("round")
    if type(done) is not int or done < 0 or not isinstance(state.get("protocol"), Mapping) or not isinstance(state.get("environment") or {}, Mapping):
        raise CorruptCheckpoint(file, "not a valid chillfl checkpoint: it holds no run state (a round number, a protocol state, the setup it ran on)")
    return done


def _stopped(folder: Path) -> bool:
    """Whether ``folder`` is a complete run a hook stopped early (``summary.json`` says ``stopped``): it resumes in place."""
    try:
        summary = json_loads((folder / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and bool(summary.get("stopped"))


def _refuse_finished(path: Path) -> None:
    """A finished run (or a ``.partial`` that became one) says so, rather than "no checkpoint"; a stopped one is resumable."""
    final = path.with_name(path.name.removesuffix(PARTIAL))
    if (path / "summary.json").is_file() and not path.name.endswith(PARTIAL) and not _stopped(path):
        raise ConfigError(FIELD, f"{path} is a finished run (it has summary.json): there is nothing to resume")
    if not path.exists():
        if path.name.endswith(PARTIAL) and (final / "summary.json").is_file():
            if _stopped(final):
                raise ConfigError(FIELD, f"{path} does not exist: the run was stopped early and its folder is {final}; resume that")
            raise ConfigError(FIELD, f"{path} finished: its results are in {final}; there is nothing to resume")
        raise ConfigError(FIELD, f"{path} does not exist")
    if path.is_symlink():
        raise ConfigError(FIELD, f"{path} is a symbolic link; resume the run folder itself")


def _refuse_diverged(path: Path, force: bool) -> None:
    """A diverged run (``NAME.failed``) resumed as it is diverges again, bit for bit: refused unless ``force`` (after an
    edit of its config.toml, e.g. a lower lr), and then it ends as ``NAME`` (it finished in place, still ``.failed``)."""
    if not (path / FAILURE).is_file():
        return
    own = own_from_python(Path(os.path.abspath(path)))  # `chillfl run` of its config.toml refuses a user's own part: say the Python call
    if not (path / CHECKPOINT).is_file() and not is_sweep(path.parent):  # --force would only say so: the fix is a new run
        again = (f"it ran on your own {own} from Python: start it again with chillfl.run(...) and a lower client.lr (into a new folder)" if own
                 else f"lower client.lr in its config.toml and start it again with `{_run_again(path)}` (into a new folder)")
        raise ConfigError(FIELD, f"{path} diverged ({FAILURE}) before its first checkpoint, so no round can be resumed; {again}")
    if not force:
        resume = (f"chillfl.resume(..., force=True) with your own {own} as before" if own and not is_sweep(path.parent)
                  else "`chillfl resume --force`")
        raise ConfigError(FIELD, f"{path} diverged ({FAILURE}): resumed as it is it diverges again; lower client.lr in its config.toml "
                                 f"and {resume}, or run it again")


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


BITWISE_EXECUTORS = frozenset({"sequential", "processes", "ray"})
"""Executors that train client by client on one float path (at the run's ``threads``, not 0): bitwise equal to each other."""


@dataclass(frozen=True)
class ExecutorMove:
    """``executor`` edited in a run's config.toml since its checkpoint: from ``before`` to ``after``."""

    before: str
    after: str
    only: bool
    """Nothing else changed."""
    bitwise: bool
    """Both are :data:`BITWISE_EXECUTORS` at a fixed thread count: the rest of the run is bitwise what it would have been."""


def executor_move(saved: str, current: bytes) -> ExecutorMove | None:
    """The edit of ``executor`` between a checkpoint's config (``saved``) and config.toml now; None: it did not change
    (or the files do not parse: the edit is then named by :func:`config_changes`)."""
    try:
        before, after = _flatten(tomllib.loads(saved)), _flatten(tomllib.loads(current.decode("utf-8-sig")))
    except (ValueError, UnicodeDecodeError):
        return None
    was, now = str(before.get("executor", "sequential")), str(after.get("executor", "sequential"))  # unset: the default
    if was == now:
        return None
    changed = {k for k in set(before) | set(after) if before.get(k, "unset") != after.get(k, "unset")}
    bitwise = {was, now} <= BITWISE_EXECUTORS and after.get("threads", 1) != 0  # threads = 0: the workers' count is not the run's
    return ExecutorMove(was, now, changed == {"executor"}, bitwise)


def move_accepted(move: ExecutorMove | None) -> TypeGuard[ExecutorMove]:
    """Whether a resume takes ``move`` without --force: ``executor`` alone, between executors of one float path, so no
    bit of what is still to run changes (docs/reproducibility.md). A run's resume and a comparison's ask this one question,
    so they take and refuse the same edits."""
    return move is not None and move.only and move.bitwise


def say_accepted(move: ExecutorMove, since: str) -> None:
    """The INFO line of a move :func:`move_accepted` takes; ``since``: ``the checkpoint of round 2``, ``the comparison started``."""
    log.info("config.toml: executor %r -> %r since %s: the same float path, what is still to run goes on bitwise", move.before, move.after, since)


def say_forced(move: ExecutorMove, since: str) -> None:
    """The WARNING line of a move a resume takes only with --force (another float path, or beside other edits); ``since``
    as for :func:`say_accepted`: a run's resume and a comparison's say the same line."""
    log.warning("config.toml: executor %r -> %r since %s: another float path, not bitwise what an uninterrupted run gives", move.before, move.after, since)


def config_changes(saved: str, current: bytes) -> str:
    """``client.lr: 0.05 -> 0.5, ...`` (the first three changed options), or what else changed: how a resume names an edit
    of ``config.toml`` (a run's since its checkpoint, a comparison's since it started)."""
    try:
        before, after = _flatten(tomllib.loads(saved)), _flatten(tomllib.loads(current.decode("utf-8-sig")))
    except (ValueError, UnicodeDecodeError):
        return "it is no longer the same TOML"
    changed = [k for k in sorted(set(before) | set(after)) if before.get(k, "unset") != after.get(k, "unset")]
    if not changed:
        return "its text changed (same values)"
    shown = ", ".join(f"{k}: {before.get(k, 'unset')!r} -> {after.get(k, 'unset')!r}" for k in changed[:3])
    return shown + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")


def _metrics_until(file: Path, run: Mapping[str, Any], done: int, force: bool) -> tuple[bytes, list[dict[str, Any]]]:
    """The bytes and records of ``metrics.jsonl`` up to round ``done``, checked against the checkpoint's record of them."""
    hint = "`chillfl resume --force` resumes with the rounds it can read"
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        if not force:
            raise ConfigError("metrics.jsonl", f"{file} is missing; the checkpoint of round {done} continues it; {hint}") from None
        data = b""
    except OSError as exc:
        raise ConfigError("metrics.jsonl", f"cannot read {file}: {exc.strerror or exc}") from None
    size = run.get("metrics_bytes")
    if isinstance(size, int):
        prefix = data[:size]
        if hashlib.sha256(prefix).hexdigest() == run.get("metrics_sha256"):
            return prefix, _parse(prefix, file, done, force=False)
        if not force:
            why = "shorter than when it was written (rounds deleted or cut)" if len(data) < size else "its rounds were edited or deleted"
            raise ConfigError("metrics.jsonl", f"{file} does not match the checkpoint of round {done}: {why}; {hint}")
    records = _parse(data, file, done, force)
    text = "".join(json.dumps(encode_record(r), sort_keys=True, allow_nan=False) + "\n" for r in records)
    return text.encode("utf-8"), records


def _parse(data: bytes, file: Path, done: int, force: bool) -> list[dict[str, Any]]:
    """The records of rounds <= ``done``; a torn or garbled line before them is one line (skipped with ``force``)."""
    records = []
    lines = data.split(b"\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json_loads(line)
            ok = isinstance(record, dict) and type(record.get("round")) is int
            if ok:
                record = decode_record(record)  # a NaN loss is NaN again, not "not measured" (storage.results.NONFINITE)
        except ValueError:
            ok = False
        if not ok:
            if force or number == len(lines):  # a torn last line (no newline yet): written after the checkpoint
                continue
            raise ConfigError("metrics.jsonl", f"line {number} of {file} is not a round's record (torn or garbled); `chillfl resume --force` skips it")
        if record["round"] <= done:
            records.append(record)
    return records

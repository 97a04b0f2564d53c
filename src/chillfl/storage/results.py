"""Result folders: written under a ``.partial`` name, renamed only when complete.

A finished folder holds ``config.toml`` (the resolved config), ``metrics.jsonl``
(one JSON object per round), ``summary.json`` and PNG plots. An interrupted or
failed run leaves ``<name>.partial/``, never a folder that looks finished.

Non-finite numbers: a NaN or infinite value is written ``null`` with a ``"nonfinite"`` entry naming it
(:mod:`chillfl.storage.jsonl`, whose codec is re-exported here), and read back as the float.

A run folder is a transaction:

* it is created atomically (:func:`claim_dir`: made under a hidden name, locked,
  given its first file, then renamed onto its name, which the rename decides:
  never a check-then-create), and renamed at the end onto a name nothing occupies
  (not even a dangling link); a run's, a comparison's and a temperature sweep's
  folder appears under its name already locked and not empty, so no other
  process ever sees it unheld;
* one process at a time writes it: :class:`ResultWriter` holds an exclusive
  ``flock`` on the folder itself (no lock file; it follows the folder's
  renames and is released when the process ends, however it ends);
* nothing is written through a link: files are replaced atomically
  (:func:`~chillfl.storage.checkpoint.write_atomic`), ``metrics.jsonl`` is
  opened with ``O_NOFOLLOW``, and :func:`refuse_links` refuses a folder to
  resume that holds any;
* it keeps ``config.toml``'s bytes and the SHA-256 and byte length of the
  metrics written so far, which the runner stores in each checkpoint so that
  a resume can tell what was changed since.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import secrets
import shutil
import stat
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Mapping, Sequence

import tomli_w

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no flock; run folders are not locked there
    fcntl = None  # type: ignore[assignment]

from chillfl.environment import ResumedSetup
from chillfl.storage.checkpoint import write_atomic
from chillfl.storage.owned_temp import remove_unlocked
from chillfl.storage.jsonl import NONFINITE as NONFINITE, decode_record as decode_record, encode_record as encode_record, strict as strict
from chillfl.paths import O_CLOEXEC, O_DIRECTORY, O_NOFOLLOW, check_name_lengths, current_folder
from chillfl.paths import CLAIM, FAILED as FAILED, PARTIAL as PARTIAL  # defined there (torch-free); the package reads them here
from chillfl.errors import ConfigError, StorageError, json_loads
FAILURE = "failure.json"


def _without_none(value: Any) -> Any:
    """TOML has no null: drop None values (every option whose value can be None defaults to None)."""
    if isinstance(value, Mapping):
        return {str(k): _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value]
    return value


def to_toml(data: Mapping[str, Any]) -> str:
    """``data`` as TOML (tomli-w: lists of tables, nested tables and every scalar round-trip; None omitted)."""
    return tomli_w.dumps(_without_none(data))


UNSET_COMMENT = "# unset (derived at run time; TOML has no null): "
"""How :func:`unset_comment` opens."""

_NOT_RUN_OPTIONS = ("variants", "compare", "tune")  # a comparison's own top-level tables: no run option in them is derived


def unset_names(config: Mapping[str, Any]) -> list[str]:
    """The options a config's dict leaves unset (``None``: derived at run time), as sorted ``section.option``: what
    :func:`to_toml` omits."""
    return sorted(_unset(config, ()))


def _unset(node: Any, keys: tuple[str, ...]) -> Iterator[str]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key in _NOT_RUN_OPTIONS and not keys:
                continue
            yield from _unset(value, (*keys, str(key)))
    elif node is None:
        yield ".".join(keys)


def unset_comment(config: Mapping[str, Any]) -> str:
    """The options a config's dict leaves unset, as TOML comment lines to go above its tables ("" when none): what
    ``--dry-run`` prints and a run folder's ``config.toml`` holds.

    Why: the saved TOML omits them (TOML has no null), so without these lines a folder would not say that a value
    (SCARLET's ``cache_duration``, ...) was worked out at run time. Names only: the values exist inside the parts that
    derive them. Comments, so rereading the file gives the same config; above the tables, as a comment after the last
    table would read as part of it; every line starts with ``#``, so a header read as the leading comment lines keeps it.
    """
    unset = unset_names(config)
    if not unset:
        return ""
    text = UNSET_COMMENT + ", ".join(unset)
    return textwrap.fill(text, width=100, subsequent_indent="#   ", break_on_hyphens=False, break_long_words=False) + "\n"


def _taken(candidate: Path) -> bool:
    """Whether ``candidate`` or its ``.partial`` exists, links included (a dangling link still blocks a rename)."""
    return os.path.lexists(candidate) or os.path.lexists(_partial_of(candidate))


def unique_dir(parent: Path, name: str) -> Path:
    """``parent/name``, or ``name-2``, ``name-3``... if taken (finished or in progress). Creates nothing:
    to create a folder without a race, use :func:`claim_dir`."""
    candidate, n = parent / name, 1
    while _taken(candidate):
        n += 1
        candidate = parent / f"{name}-{n}"
    return candidate


def in_the_way(parent: Path, name: str) -> str | None:
    """What stands at a comparison's run's own name in ``parent`` (``name``, ``name.partial`` or ``name.failed``) that is
    no folder, as ``"<path> is a file"``; None when nothing does (a folder there is the run's own, which the comparison
    reads back or resumes). A comparison's run has no free-name search (:func:`claim_dir` takes ``name-2`` for a separate
    run): its readers (``resume``, ``status``, ``report``) look at the exact name, so a run moved to ``name-2`` (or, when
    it diverged, to ``name.failed-2``) was never read back, trained again on every resume, and shown as not started."""
    for path in (parent / name, parent / f"{name}{PARTIAL}", parent / f"{name}{FAILED}"):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{path} cannot be read ({exc.strerror or exc})"
        if not stat.S_ISDIR(mode):
            what = ("a symbolic link" if stat.S_ISLNK(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a file" if stat.S_ISREG(mode)
                    else "not a folder")
            return f"{path} is {what}"
    return None


def claim_dir(parent: Path, name: str, fill: Callable[[Path], None], exact: bool = False, locks: bool = True) -> tuple[Path, Path, RunLock]:
    """Claim ``parent/<name>[-N].partial`` made, locked and holding its first files in one step; returns
    ``(final, partial, lock)``. How chillfl makes a folder of results: a run's (:class:`ResultWriter`), a
    comparison's started without ``--shard``, a temperature sweep's (a shard that starts a comparison makes its folder
    unlocked, not empty, and locks it shared once joined: :func:`chillfl.sweeps.shard.join_folder`).

    The folder is made under a hidden name of its own (:func:`_new_folder`), locked, given its first files by ``fill``
    (at least one: the rename that decides the name fails onto a folder that holds files, :func:`_publish`) and only
    then renamed onto its name. Made there at once and locked after, another process saw it empty and unlocked: a
    shard of the comparison renamed its own folder onto it (a rename replaces an empty folder), a run's claim did
    the same, or a duplicate took it for abandoned. Whatever stops the claim (a Ctrl-C, a full disk) removes the
    hidden folder again, so that no empty ``.partial`` pushes the next one to ``name-2``.

    ``exact``: ``name`` only, never ``name-N`` (a comparison's run); taken, :class:`FolderInUse`. Otherwise the next
    free ``name-N``, a separate run (or comparison) beside the one there. A claim that fails (no file locks, a
    permission, a full disk) is one line on ``out_dir`` naming the ``.partial`` folder in ``parent`` that it would have
    become (``name-N.partial`` where ``name`` is taken: not the user's other run's folder), never the hidden one,
    which they never see.

    ``locks=False``: a file system without file locks is no refusal; the lock returned then holds nothing. For a
    folder nothing resumes or shares (a temperature sweep's, claimed after all its training), which worked on such a
    file system before it was claimed locked: its first file alone keeps another claim's rename off it."""
    # a name whose folder is over 255 bytes: refused before any folder is made (the rename onto it failed after
    # _new_folder had made out_dir's missing parents, left empty)
    check_name_lengths(parent / name, "name", PARTIAL)
    held = _new_folder(parent)
    shown = _partial_of(parent / name if exact else unique_dir(parent, name))  # where it goes, now: the free name
    lock = None
    try:
        try:
            lock = RunLock(held, "out_dir", named=shown)
        except LocksUnsupported:
            if locks:
                raise
            lock = RunLock.unheld()
        try:
            fill(held)  # not empty now: no other claim's rename can replace the folder
        except OSError as exc:
            raise _unmade(shown, exc) from None
        final, partial = _publish(held, parent, name, exact)
    except BaseException:
        shutil.rmtree(held, ignore_errors=True)
        if lock is not None:
            lock.release()
        raise
    return final, partial, lock


def _partial_of(final: Path) -> Path:
    """The ``.partial`` folder a run whose finished folder is ``final`` is written in."""
    return final.with_name(final.name + PARTIAL)


def _unmade(shown: Path, exc: OSError) -> ConfigError:
    """A claim's first file could not be written: the line names the folder as the user knows it (``shown``), with
    the file and the system's reason, on ``out_dir``. A :class:`~chillfl.errors.StorageError` (``write_atomic``'s)
    names the hidden folder in its own text: its reason is read from the ``OSError`` it was raised from."""
    cause = exc if exc.strerror else exc.__cause__
    if isinstance(cause, OSError) and cause.strerror:
        file = f"its {Path(cause.filename).name.removesuffix('.tmp')}: " if cause.filename else ""  # write_atomic's temporary file: the one it becomes
        return ConfigError("out_dir", f"cannot create {shown}: {file}{cause.strerror}")
    return ConfigError("out_dir", f"cannot create {shown}: {type(exc).__name__}")


_CLAIM = CLAIM  # the hidden folder a run's folder is made in (:func:`_new_folder`), before it is renamed onto its name


def _new_folder(parent: Path) -> Path:
    """A new, empty folder of a name of its own in ``parent`` (hidden, unique to this process), made as ``mkdir`` makes one.

    Why not the run's name at once: a folder made there is seen by other processes before it is locked, and one of them
    took it for an abandoned one (a duplicate of a comparison's shard removed it as a run without a checkpoint, or took
    ``NAME-2`` beside it and ran the same run again). :func:`claim_dir` locks this one first, then renames it there."""
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("out_dir", f"cannot create {parent}: {exc.strerror or exc}") from None
    _remove_stale_claims(parent)
    while True:
        folder = parent / f"{_CLAIM}{os.getpid()}-{secrets.token_hex(6)}"
        try:
            folder.mkdir()  # the mode a run folder always had (0o777 less the umask), not mkdtemp's 0o700
            return folder
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConfigError("out_dir", f"cannot create a folder in {parent}: {exc.strerror or exc}") from None


_STALE_CLAIM_S = 60.0
"""How old an unlocked claim folder must be before :func:`_remove_stale_claims` takes it for a killed claimer's: one being
made is locked within microseconds of its ``mkdir``, and must not be taken in between."""


def _remove_stale_claims(parent: Path) -> None:
    """Remove this user's claim folders in ``parent`` that no process holds and that are older than :data:`_STALE_CLAIM_S`:
    a process killed (SIGKILL) between making its claim and renaming it left one for good, which the HTML report then
    named among the incomplete runs."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    now = time.time()
    for entry in entries:
        try:
            if (not entry.name.startswith(_CLAIM) or not entry.is_dir(follow_symlinks=False)
                    or (st := entry.stat(follow_symlinks=False)).st_uid != os.getuid() or now - st.st_mtime < _STALE_CLAIM_S):
                continue
        except OSError:
            continue
        remove_unlocked(Path(entry.path))


def _publish(held: Path, parent: Path, name: str, exact: bool) -> tuple[Path, Path]:
    """Rename the locked, non-empty folder ``held`` onto ``parent/<name>[-N].partial``; returns ``(final, partial)``.

    The rename decides as ``mkdir`` did: onto a folder that holds files (every run's folder, made here) it fails, and the
    name is taken. A name whose final folder appeared meanwhile (another run finished) is given up again.
    ``exact``: a comparison's run, which has no ``-N`` (:func:`in_the_way`): its name taken, or ended, is another process
    running it (a duplicate of the shard), and this one is refused as when it finds that folder held
    (:class:`FolderInUse`), instead of running the run a second time in ``NAME-2``."""
    n = 0
    while True:
        n += 1
        final = parent / (name if n == 1 else f"{name}-{n}")
        partial = _partial_of(final)
        if not _taken(final) and not (exact and os.path.lexists(final.with_name(final.name + FAILED))):
            try:
                held.rename(partial)
            except OSError as exc:
                if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                    raise ConfigError("out_dir", f"cannot create {partial}: {exc.strerror or exc}") from None
            else:
                if not os.path.lexists(final):
                    return final, partial
                partial.rename(held)  # finished by someone else between the check and the rename: ours is held, none other touched it
        if exact:
            raise _run_by_another(final, partial)


def _run_by_another(final: Path, partial: Path) -> FolderInUse:
    """Why a comparison's run cannot have its own folder: the lock another process holds on it (the line a held folder
    always gave), else the folder that process made of it meanwhile."""
    try:
        RunLock(partial).release()
    except FolderInUse as exc:
        return exc
    except ConfigError:  # no folder (any more), or none to open: the one that stands there is named below
        pass
    there = next((p for p in (partial, final, final.with_name(final.name + FAILED)) if os.path.lexists(p)), partial)
    return FolderInUse("run_dir", f"{there} was made by another chillfl process while this one prepared the run (it runs or ran it)")


def rename_free(path: Path, final: Path, name: str) -> Path:
    """Rename ``path`` onto ``final``, or onto the next free ``name-N`` if something (even a link) is there."""
    while True:
        if os.path.lexists(final):
            final = unique_dir(final.parent, name)
            continue
        try:
            path.rename(final)
            return final
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
                raise StorageError(f"cannot rename {path} to {final}: {exc.strerror or exc}") from exc


class FolderInUse(ConfigError):
    """Another chillfl process holds the folder's lock (a run, a resume of it, or a shard of a comparison)."""


class LocksUnsupported(ConfigError):
    """The folder's file system refuses ``flock`` itself (not a lock another process holds)."""


class RunLock:
    """An exclusive ``flock`` on a run folder (its own descriptor: no lock file, follows renames, released at exit).

    ``shared``: a shared lock instead, which the shards of one comparison hold together (``--shard K/N``) and
    which keeps out an exclusive one (a resume of the whole comparison) while any shard runs.
    """

    def __init__(self, folder: Path, field: str = "run_dir", shared: bool = False, named: Path | None = None) -> None:
        """``named``: the folder the lines name (default ``folder``): a claim's hidden folder (:func:`claim_dir`) is
        named as the folder it becomes, which the user looks for."""
        self._fd: int | None = None
        if fcntl is None:
            return
        flags = os.O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC
        shown = folder if named is None else named
        try:
            self._fd = os.open(folder, flags)
        except OSError as exc:
            raise ConfigError(field, f"cannot open {shown}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(self._fd)
            self._fd = None
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):  # held: the one error a non-blocking flock has for that
                raise FolderInUse(field, f"{shown} is in use by another chillfl process (a run or resume of it is going on)") from None
            # NFS without its lock service (ENOLCK), Lustre mounted without flock (ENOSYS, EOPNOTSUPP): every run was
            # refused as "in use" there, a false reason
            raise LocksUnsupported(
                field,
                f"the file system of {shown} does not support file locks (flock: {exc.strerror or exc}), which chillfl takes on a "
                "folder so that no two processes write it at once: use a folder on one that does (a local disk, NFS with its "
                "lock service, Lustre mounted with -o flock)",
            ) from None

    @classmethod
    def unheld(cls) -> RunLock:
        """A lock that holds nothing (:func:`claim_dir` with ``locks=False`` on a file system without file locks)."""
        lock = cls.__new__(cls)
        lock._fd = None
        return lock

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the lock
            self._fd = None


WANDB_DIR = "wandb"
"""The folder W&B writes into a run folder (the ``wandb`` sink): W&B makes links there itself (``latest-run``,
``debug.log``) and chillfl neither reads nor writes inside it."""


def refuse_links(folder: Path, field: str = "run_dir") -> None:
    """A run folder holds no symbolic links: chillfl would replace or write through them.

    The inside of a ``wandb/`` folder is W&B's, which keeps links of its own there: refused, they made every run
    with the wandb sink, once interrupted, impossible to resume. A ``wandb`` that is itself a link is refused."""
    for root, dirs, files in os.walk(folder):
        for entry in [*dirs, *files]:
            if os.path.islink(os.path.join(root, entry)):
                raise ConfigError(field, f"{os.path.join(root, entry)} is a symbolic link; a run folder holds none (remove it)")
        dirs[:] = [d for d in dirs if d != WANDB_DIR]  # not walked into: W&B's own links


class ResultWriter:
    """Writes one run's folder, holding its lock; ``finish()`` makes it final by renaming it."""

    def __init__(self, out_dir: str | Path, name: str, started_in: Path | None = None, exact: bool = False) -> None:
        """Claim ``out_dir/name[-N].partial`` locked, with its ``metrics.jsonl`` open (:func:`claim_dir`: made, locked
        and given that file under a hidden name, then renamed onto its name); whatever stops that (a Ctrl-C, a full
        disk) removes the folder again, so that no empty ``.partial`` pushes the next run to ``name-2``.

        ``started_in``: the folder the run's relative paths are read from, which its checkpoints record for a resume
        typed elsewhere (a comparison's run: the comparison's; default: the current folder). ``exact``: ``name`` only,
        never ``name-N`` (a comparison's run); taken, :class:`FolderInUse`."""
        self._name = name
        self.started_in = str(started_in) if started_in is not None else current_folder()
        self._metrics: int | None = None
        self._resumed = b""
        self.resumed: list[ResumedSetup] = []
        """The run's resumes across setups, for its checkpoints and ``summary.json`` (:func:`chillfl.runner.resumed_across`)."""
        self.config_bytes = b""
        try:
            self.final, self.path, self._lock = claim_dir(Path(out_dir), name, self._first_metrics, exact)
        except BaseException:
            self._close()
            raise

    def _first_metrics(self, folder: Path) -> None:
        """The claimed folder's first file, its empty ``metrics.jsonl``, open (:func:`claim_dir` names its error: ``folder`` is hidden)."""
        self.path = folder
        self._open_metrics(b"", create=True)

    @classmethod
    def reopen(cls, path: str | Path, lock: RunLock, metrics: bytes, config: bytes, started_in: Path | None = None) -> "ResultWriter":
        """Continue writing the interrupted run folder ``path`` (``NAME.partial``, or a stopped run's ``NAME``), whose ``lock`` the caller took.

        Nothing is written here: :meth:`resume` replaces ``metrics.jsonl`` by ``metrics`` (the rounds up to the
        checkpoint the run resumes from, as they were written; rounds written after it are run again) once the
        checkpoint's state is known to fit the run, so that a resume refused for a checkpoint that does not fit
        leaves the folder as it was. ``started_in``: the folder the run was started in, as its checkpoint
        recorded it (None: unknown; the folder the resume is typed in is not recorded in its place).
        """
        self = cls.__new__(cls)
        self.path = Path(path)
        self.started_in = str(started_in) if started_in is not None else None
        self._name = self.path.name.removesuffix(PARTIAL).removesuffix(FAILED)  # a diverged run resumed with --force ends as NAME
        final = self.path.with_name(self._name)
        if final == self.path:  # a completed folder of a run a callback stopped early: it continues in place
            self.final = final
        else:
            self.final = final if not os.path.lexists(final) else unique_dir(self.path.parent, self._name)
        self._lock = lock
        self.config_bytes = config
        self._metrics = None
        self._resumed = metrics
        self.resumed = []
        return self

    def resume(self) -> None:
        """Start writing the folder :meth:`reopen` took: ``metrics.jsonl`` cut back to the checkpoint's rounds, and
        a diverged run's ``failure.json`` (the last attempt's; this one writes its own if it diverges) removed."""
        if self.path.name.endswith(FAILED):
            (self.path / FAILURE).unlink(missing_ok=True)
        write_atomic(self.path / "metrics.jsonl", self._resumed)
        self._open_metrics(self._resumed, create=False)

    def _open_metrics(self, written: bytes, create: bool) -> None:
        flags = os.O_WRONLY | os.O_APPEND | O_NOFOLLOW | O_CLOEXEC
        flags |= (os.O_CREAT | os.O_EXCL) if create else 0
        try:
            self._metrics = os.open(self.path / "metrics.jsonl", flags, 0o644)
        except OSError as exc:
            raise StorageError(f"cannot open {self.path / 'metrics.jsonl'}: {exc.strerror or exc}") from exc
        self._sha = hashlib.sha256(written)
        self.metrics_bytes = len(written)

    @property
    def metrics_sha256(self) -> str:
        """SHA-256 of ``metrics.jsonl`` as written so far (``metrics_bytes`` long)."""
        return self._sha.hexdigest()

    def write_config(self, config: Mapping[str, Any], header: str = "") -> None:
        """``config.toml``; ``header``: comment lines on top (what the run ran with), then the options left unset
        (:func:`unset_comment`: ``config`` is the dict with its ``None`` values). ``config_bytes``: what was written, for the checkpoint's checksum."""
        data = (header + unset_comment(config) + to_toml(config)).encode("utf-8")
        write_atomic(self.path / "config.toml", data)
        self.config_bytes = data

    def append(self, record: Mapping[str, Any]) -> None:
        """One round's line, written with ``os.write`` (unbuffered: a full disk fails here, not at close)."""
        line = (json.dumps(encode_record(record), sort_keys=True, allow_nan=False) + "\n").encode("utf-8")
        assert self._metrics is not None, "the metrics file is closed"
        view = memoryview(line)
        try:
            while view:
                view = view[os.write(self._metrics, view) :]
        except OSError as exc:
            what = "no space left on the device" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
            raise StorageError(f"cannot write {self.path / 'metrics.jsonl'}: {what}") from exc
        self._sha.update(line)
        self.metrics_bytes += len(line)

    def write_json(self, name: str, data: Any) -> None:
        text = json.dumps(strict(data), indent=2, sort_keys=True, allow_nan=False) + "\n"
        write_atomic(self.path / name, text.encode("utf-8"))

    def _close(self) -> None:
        if self._metrics is not None:
            os.close(self._metrics)
            self._metrics = None

    def finish(self) -> Path:
        self._close()
        try:
            if self.path != self.final:  # a stopped run resumed in place is already final
                self.final = rename_free(self.path, self.final, self._name)
        finally:
            self._lock.release()
        self.path = self.final
        return self.final

    def fail(self, reason: Mapping[str, Any]) -> Path:
        """Mark the run failed: ``failure.json`` with the reason, the folder renamed ``NAME.failed``."""
        self._close()
        try:
            self.write_json(FAILURE, reason)
            failed = rename_free(self.path, self.final.with_name(self.final.name + FAILED), self.final.name + FAILED)
        finally:
            self._lock.release()
        self.path = failed
        return failed

    def abort(self) -> None:
        """Close files and release the folder; it stays as ``*.partial`` for inspection or resume."""
        self._close()
        self._lock.release()


def read_metrics(folder: str | Path, torn_tail: bool = False) -> list[dict[str, Any]]:
    """Every round's record in ``folder/metrics.jsonl`` (:func:`decode_record`: a non-finite value is NaN or inf again);
    a line that is not JSON raises ValueError.

    ``torn_tail``: an unfinished run's folder (``.partial``, ``.failed``), where a kill while a round's line was
    written leaves that last line cut short (no newline): it is dropped, as ``chillfl resume`` drops it.
    A ``metrics.jsonl`` that is no regular file raises ValueError before it is opened: a FIFO blocked the reader forever
    (a resumed comparison reading back its finished runs), a link to /dev/zero filled the memory.
    """
    path = Path(folder) / "metrics.jsonl"
    if not stat.S_ISREG(os.stat(path).st_mode):  # OSError when missing, as read_bytes raised
        raise ValueError("not a regular file")
    data = path.read_bytes()
    whole, _, tail = data.rpartition(b"\n")
    records = [json_loads(line) for line in whole.split(b"\n") if line.strip()]
    if tail.strip():
        try:
            records.append(json_loads(tail))
        except ValueError:
            if not torn_tail:
                raise
    return [decode_record(r) if isinstance(r, dict) else r for r in records]


def series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(rounds, values) for rounds where ``key`` was measured."""
    pts = [(r["round"], r[key]) for r in records if r.get(key) is not None]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def nulls_as_nan(records: Sequence[Mapping[str, Any]], key: str) -> list[Mapping[str, Any]]:
    """``records`` with a ``key`` recorded as null (measured, nothing finite to show) made NaN, so that a line breaks
    there as it does at a NaN: dropped, a null was bridged by a straight line while a NaN broke it. A record without
    ``key`` (a round that did not evaluate) is left as it is, and so are records whose ``key`` is null in every round (nothing
    was ever measured, ``local_acc`` without client evaluations): an all-NaN line would be a legend entry with nothing drawn."""
    if all(r.get(key) is None for r in records):
        return list(records)
    return [{**r, key: math.nan} if key in r and r[key] is None else r for r in records]


def last_value(records: Sequence[Mapping[str, Any]], key: str) -> Any:
    """``key`` in the last record that has it (None: none has it). A skipped round's record carries no bytes, accuracy
    or attack success (nothing was sent or trained), so the run's final value is the last round that ran's."""
    for record in reversed(records):
        if record.get(key) is not None:
            return record[key]
    return None


def value_at_end(records: Sequence[Mapping[str, Any]], key: str) -> Any:
    """``key`` as the run's last round measured it: that of the last record that holds ``key`` or is no skipped round
    (a skipped round trains nothing, so its model is the last round that ran's, which measured it); None where that
    record has it null or not at all (not measured at the round the run reports), never an earlier round's value, which
    is another model's (:func:`last_value` took the last non-null one: a stop round that measured no backdoor success
    reported an earlier round's as final)."""
    for record in reversed(records):
        if key in record or not record.get("skipped"):
            return record.get(key)
    return None


SPENT_KEYS = ("epsilon", "epsilon_upload")
"""The records' privacy budgets (:func:`spent_epsilon`): ``summary.json``'s ``final_`` of each, null there where it is
unbounded (infinite), which a reader of the summary reads back as such, not as "not measured"."""


def spent_epsilon(records: Sequence[Mapping[str, Any]], key: str = "epsilon") -> float | None:
    """The privacy budget spent by the end: ``key`` of the last record that carries it, infinite where that one is null
    (an epsilon the accountant could not bound, never an earlier, smaller one); None: no record carries it."""
    spent = [r[key] for r in records if key in r]
    if not spent:
        return None
    return math.inf if spent[-1] is None or not math.isfinite(spent[-1]) else float(spent[-1])


def rounds_to_reach(records: Sequence[Mapping[str, Any]], key: str, target: float) -> int | None:
    """First round whose ``key`` is >= target (None if never): the first *evaluated* one, so under ``eval.every`` = k it
    may lag the round that reached it by up to k - 1 rounds (:func:`evaluation_interval`)."""
    for rnd, value in zip(*series(records, key)):
        if value >= target:
            return rnd
    return None


def evaluation_interval(records: Sequence[Mapping[str, Any]], key: str = "global_acc") -> int:
    """The most rounds between two measurements of ``key``, counted in rounds that trained (1: every round that trained
    measured it; ``eval.every`` = k: k). A rounds or bytes to a target is that of the first *measured* round reaching it,
    so it may be up to this - 1 rounds late. Why from the records, not the config: they are what a target round is read
    from, and a skipped round (nobody trained) leaves the model unchanged, so it hides nothing. 1 without measurements."""
    unmeasured = longest = 0
    measured = False
    for r in records:
        if r.get(key) is not None:
            longest, unmeasured, measured = max(longest, unmeasured), 0, True
        elif not r.get("skipped"):
            unmeasured += 1
    return longest + 1 if measured else 1


LOCAL_MIX_TV = "local_val_mix_tv"
"""The summary key of :meth:`~chillfl.data.FederatedData.local_validation_mismatch`: how far the clients' local
validation splits are from their training class mix (mean total variation distance), which ``local_val_acc`` is
scored on (:func:`chillfl.report.caveats.local_mix_warning` reads it)."""


def summarize(records: Sequence[Mapping[str, Any]], target: float | None = None, local_mix_tv: float | None = None) -> dict[str, Any]:
    """Final and best values of the accuracy/loss metrics, with the round of each best; the final spread of the clients'
    local accuracies (``final_local_acc_std``, ``final_local_acc_worst10``); the final privacy budget
    spent (``final_epsilon``: the last round's, infinite, written null, where that round's is null, never an earlier
    finite one; under soft labels ``final_epsilon_upload``, the client-level figure) and backdoor success (``final_attack_success_rate``:
    the last round's, :func:`value_at_end`; absent where that round measured none) where the records have them;
    ``local_mix_tv``: the run's data's local validation mismatch (:data:`LOCAL_MIX_TV`; None: it has no local splits).
    With a ``target``: ``rounds_to_target`` (the first evaluated round reaching it) and ``target_eval_interval``
    (:func:`evaluation_interval`: > 1 means that round, and ``communication.bytes_to_target``, may be up to that - 1
    rounds late; None where no round measured ``global_acc``, so that a null ``rounds_to_target`` reads "not measured",
    not "measured every round and never met")."""
    out: dict[str, Any] = {"rounds": records[-1]["round"] if records else 0}
    if local_mix_tv is not None:
        out[LOCAL_MIX_TV] = local_mix_tv
    for key, better in (("global_acc", max), ("local_acc", max), ("global_client_acc", max), ("global_loss", min), ("local_loss", min), ("train_loss", min),
                        ("global_ece", min), ("global_nll", min), ("global_brier", min), ("val_acc", max), ("val_loss", min),
                        ("local_val_acc", max)):
        rounds, values = series(records, key)
        finite = [(r, v) for r, v in zip(rounds, values) if math.isfinite(v)]
        if not finite:
            continue
        best_round, best = better(finite, key=lambda p: p[1])
        out[f"final_{key}"] = values[-1]
        out[f"best_{key}"] = best
        out[f"best_{key}_round"] = best_round
    for key in ("local_acc_std", "local_acc_worst10"):  # the clients' spread (LocalLog.metrics): final only, a round of least spread is no best
        values = series(records, key)[1]
        if any(math.isfinite(v) for v in values):  # as final_local_acc: the last measured value, a NaN of it included
            out[f"final_{key}"] = values[-1]
    for key in SPENT_KEYS:  # [privacy]: the budget spent by the end; under soft labels the client-level figure too
        if (spent := spent_epsilon(records, key)) is not None:
            out[f"final_{key}"] = spent
    if (success := value_at_end(records, "attack_success_rate")) is not None:  # [attack] backdoor: the reported round's, else absent
        out["final_attack_success_rate"] = success
    if target is not None:
        out["target_accuracy"] = target
        out["rounds_to_target"] = rounds_to_reach(records, "global_acc", target)
        measured = any(r.get("global_acc") is not None for r in records)  # none: no interval to claim (1 would say "every round, never met")
        out["target_eval_interval"] = evaluation_interval(records) if measured else None  # > 1: rounds_to_target is the first *evaluated* round
    return out


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)

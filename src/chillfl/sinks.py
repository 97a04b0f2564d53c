"""Metric sinks: every round's scalars into CSV, TensorBoard, Weights & Biases or MLflow.

Sinks are run callbacks (:class:`chillfl.runner.Callback`) plus ``close()``:
the engine knows nothing of them. ``[log] sinks = ["csv", "tensorboard",
"wandb", "mlflow"]`` makes the runner add them to a written run; from Python, pass them
as ``callbacks`` (or set ``log.sinks``). The file sinks write under the run folder:

============  =========================  ====================================
sink          where                      what
============  =========================  ====================================
csv           ``metrics.csv``             one row per round, ``round`` first; the tables
              ``metrics_clients.csv``     one line per client and round: ``round,key,client,value``
tensorboard   ``tensorboard/``            one scalar per key, step = round
wandb         ``wandb/*run-*/``           a W&B run: online when logged in, else offline (``wandb sync`` uploads it)
mlflow        the tracking store          an MLflow run: params, metrics, the run folder's small files
============  =========================  ====================================

W&B's mode (``[log] wandb_mode``): ``auto`` leaves it to W&B (online with an API key, as
``WANDB_MODE`` or ``wandb offline`` say otherwise) and logs offline, saying so in one line, when
W&B has no API key, so that a run never stops at a login prompt; ``online`` and ``offline`` force it.
MLflow goes where ``[log] mlflow_tracking_uri`` says, else where MLflow itself would
(``$MLFLOW_TRACKING_URI``, else its local default: ``sqlite:///mlflow.db`` and artefacts in ``./mlruns/`` of the current folder); its params are the resolved config flattened
(``client.lr``), its metrics every scalar at step = round, its artefacts the run folder's files
of up to ``ARTIFACT_MAX_BYTES`` (config, metrics, summary, a small model; no checkpoint, no sub-folder).

(W&B's own service also writes a debug log into its cache folder,
``~/.cache/wandb/logs`` or ``$WANDB_CACHE_DIR``, and MLflow ``~/.config/mlflow/telemetry.json``, an installation id for
its usage telemetry, which is on unless ``MLFLOW_DISABLE_TELEMETRY=true`` or ``DO_NOT_TRACK=true``; the run's data stays
in the run folder.) A ``file:`` MLflow store needs ``MLFLOW_ALLOW_FILE_STORE=true`` (MLflow 3 refuses it otherwise);
a store that cannot be used is refused before the run folder is made (:func:`check_mlflow_store`).

What is logged (:func:`scalars`): every number of a round's record (booleans
as 0/1; NaN and the infinities as they are, ``nan`` / ``inf`` in the CSV; TensorBoard stores float32, so a value past
±3.4e38 reads back as ±inf there and one below ~1e-45 as 0, where the others keep the float64), and one
level of tables of numbers flattened as ``key/sub`` (e.g. ``client_train_loss/3``), except
in the CSV, where they are lines of ``metrics_clients.csv``; lists and ``None`` are left out. ``metrics.jsonl`` stays the complete,
bitwise-reproducible record; sinks are views of it.

Choices
-------
* ``metrics.csv`` is rewritten whole when a round brings a new column (e.g. the
  first evaluation round), so every row has every column; a float is Python's
  shortest round-trip ``repr`` of it, an integer (a byte count, a flag as 0 / 1) an integer, as in ``metrics.jsonl``.
  The per-client tables are not columns of it: a federation of thousands of clients brings clients not seen
  before for hundreds of rounds, and each rewrote the file (quadratic in the clients). They go long-format
  into ``metrics_clients.csv``, which is only appended to (:class:`CsvSink`).
* A resumed run: the CSV sink writes both files again from the records up to the checkpoint;
  TensorBoard writes again those of them its earlier event files lack (a hard kill
  loses what its writer had buffered) and purges the steps from the first one it
  writes (``purge_step``; after the checkpoint when none is missing); W&B and MLflow start a new
  run (MLflow's tagged ``chillfl.resumed_at`` with the round) and log the records up to
  the checkpoint into it first, so that the resumed run holds every round: after a
  hard kill (SIGKILL) the earlier W&B run may hold none (W&B's service had them
  buffered). MLflow's earlier runs of the folder still RUNNING are set KILLED: those its
  ``mlflow-runs.json`` names (:data:`MLFLOW_RUNS`), not every run tagged with its path,
  which another machine's folder can share.
* W&B's and MLflow's run is ended when the sinks close, before the folder is renamed: W&B's with exit code 1,
  MLflow's KILLED or FAILED, when an exception is on its way out (diverged, interrupted); MLflow's artefacts are
  logged at ``on_end``, from the final folder. MLflow's ``chillfl.folder`` tag names the final folder (no
  ``.partial``; a diverged run's ``NAME.failed``), guessed at the start and set again from the folder the run
  got (``NAME-2`` at ``on_end``; ``NAME-compare.failed/...`` by :func:`comparison_ended`); a comparison's run is
  in the W&B group, and has the MLflow tag ``chillfl.comparison``, of the comparison's folder name and a hash of its
  ``out_dir`` (``NAME-compare@1a2b3c4d``: :func:`comparison_label`; the MLflow tag becomes ``NAME-compare.failed@...``
  where every run failed), and logs as ``out_dir`` the comparison's final folder, as its ``config.toml`` says. An
  offline W&B run whose folder ended elsewhere than its first line said gets a second line.
* Sinks are closed once the run's files (summary, model, figures) are written, just before the run folder is renamed
  from ``NAME.partial``: nothing is written into a folder that no longer exists, and a failure while those files are
  written ends the W&B and MLflow runs as failed (closed before them, they said FINISHED of a run left ``.partial``).
"""

from __future__ import annotations

import csv
import errno
import hashlib
import json
import logging
import math
import netrc
import os
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MethodType
from typing import Any, Literal, NamedTuple, Protocol
from urllib.parse import urlparse

from chillfl.errors import ConfigError, Diverged, StorageError, json_loads, one_line
from chillfl.extras import need
from chillfl.metrics.records import client_order
from chillfl.numeric import is_real
from chillfl.once import warn_once
from chillfl.paths import PARTIAL

SinkName = Literal["csv", "tensorboard", "wandb", "mlflow"]
SINKS: tuple[SinkName, ...] = ("csv", "tensorboard", "wandb", "mlflow")
WandbMode = Literal["auto", "online", "offline"]
CSV_FILE = "metrics.csv"
CLIENTS_CSV_FILE = "metrics_clients.csv"
"""The CSV sink's long-format file of the records' tables (:func:`clients_path` of ``CSV_FILE``)."""
CLIENTS_HEADER = ("round", "key", "client", "value")
TENSORBOARD_DIR = "tensorboard"
ARTIFACT_MAX_BYTES = 16 * 2**20
"""The largest run-folder file the MLflow sink uploads (a CPU-scale model fits; a ResNet's does not)."""
MLFLOW_PARAM_MAX = 6000
"""MLflow's longest param value (characters); a longer one is cut, ending in ``...``."""
MLFLOW_RUNS = "mlflow-runs.json"
"""The run folder's record of the MLflow runs it started (one per start and resume; id and tracking URI): the ones a
resume may set KILLED (not another machine's run of a folder at the same path), and the ones to tag again when a
comparison's folder ends elsewhere than its runs were told (:func:`comparison_ended`)."""
NOT_ARTIFACTS = ("checkpoint.safetensors", MLFLOW_RUNS)
"""Run-folder files the MLflow sink leaves out: the resume state (gone once the run has finished) and the sink's own record."""

log = logging.getLogger(__name__)


class Finished(Protocol):
    """What a sink reads of a finished run: :class:`chillfl.runner.RunOutput` is one. A protocol, not that class:
    the runner imports this module, and an import back, even under ``TYPE_CHECKING``, would be a cycle
    (``tests/test_import_cycles.py`` counts every import)."""

    @property
    def folder(self) -> Path | None:
        """The run's folder, renamed from ``.partial`` before ``on_end`` runs; None when the run was not written."""
        ...


class Sink(Protocol):
    """A run callback (``on_round``, ``on_end``) that holds files open until ``close()``; ``failure``: the exception
    that ended the run (diverged, interrupted, failed), None when it finished. Passed by the runner, not read from
    ``sys.exc_info()``, which also holds an exception the caller is only handling (a retry inside ``except``)."""

    def on_round(self, record: Mapping[str, Any]) -> None: ...

    def on_end(self, output: Finished) -> None: ...

    def close(self, failure: BaseException | None = None) -> None: ...


def scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The loggable numbers of a round's record (without ``round``): numbers, and tables of numbers as ``key/sub``."""
    return {key: float(value) for key, value in numbers(record).items()}


def numbers(record: Mapping[str, Any]) -> dict[str, int | float]:
    """:func:`scalars` with each integer kept an ``int`` (a byte count, a number of clients; a flag as 0 / 1): the
    CSV writes what ``metrics.jsonl`` holds, ``3`` and not ``3.0``, and a count past 2**53 exactly."""
    out: dict[str, int | float] = {}
    for key, value in record.items():
        if key == "round":
            continue
        if _is_number(value):
            out[key] = _number(value)
        elif isinstance(value, Mapping):
            for sub, item in value.items():
                if _is_number(item):
                    out[f"{key}/{sub}"] = _number(item)
    return out


def _number(value: int | float) -> int | float:
    """An int (a bool as 0 / 1) as an int, anything else as a Python float (a numpy float's ``repr`` names its type)."""
    return int(value) if isinstance(value, int) else float(value)


def _is_number(value: Any) -> bool:
    """A number, NaN and the infinities included, or a bool. Non-finite values are logged as they are (every backend
    takes them): a global loss that overflowed to ``inf`` left out looked like a round where it was not measured.
    Unlike a config's numbers (:mod:`chillfl.numeric`), a record's flags (PA3Fed's ``agg_clp``: the round is inside a
    critical learning period) are logged, as 0.0 / 1.0, so that a sink plots when they were on (True -> 1.0)."""
    return isinstance(value, bool) or is_real(value)


@contextmanager
def writing(path: Path) -> Iterator[None]:
    """An ``OSError`` met while a file sink writes ``path`` (a full disk, a quota, an I/O error) as the
    :class:`~chillfl.errors.StorageError` line chillfl's own files give (exit 1; the runner adds which checkpoint is
    kept), not a traceback. The ``OSError`` is its cause: the runner reads a full disk from its ``errno``."""
    try:
        yield
    except StorageError:
        raise
    except OSError as exc:
        what = "no space left on the device" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
        raise StorageError(f"cannot write {path}: {what}") from exc


class CsvSink:
    """``metrics.csv``: one row per round, columns ``round`` then every number of the record in sorted order; an
    integer as an integer (``3``), a float as its shortest round-trip ``repr`` (:func:`numbers`). The record's tables
    (``client_train_loss``, PA3Fed's ``agg_scores``: one value per client) go long-format into ``metrics_clients.csv``
    beside it (:func:`clients_path`): a ``round,key,client,value`` line per cell, appended round by round.

    Why a second file: as columns (``client_train_loss/<id>``), every round that drew a client for the first time
    rewrote the whole file, which a federation of thousands of clients does for hundreds of rounds (quadratic in the
    clients, and most cells empty). ``metrics.csv`` is still rewritten when a round brings a number not seen before
    (the first evaluation round), a few times in a run, so that every row has every column; ``metrics_clients.csv``
    is only appended to. Each round's lines are in a canonical order (tables by key, clients by id: :func:`table_cells`),
    so a resumed run, whose first rounds are read back from ``metrics.jsonl``, writes the bytes an uninterrupted one does.

    ``records``: the rounds already done (a resume's, up to its checkpoint): both files are written again from them."""

    def __init__(self, path: str | Path, records: Sequence[Mapping[str, Any]] = ()) -> None:
        self.path = Path(path)
        self.clients_path = clients_path(self.path)
        self.rows: list[tuple[int, dict[str, int | float]]] = [(int(r["round"]), own_numbers(r)) for r in records]
        self.columns: list[str] = sorted({k for _, row in self.rows for k in row})
        with writing(self.path):
            self._rewrite()
        with writing(self.clients_path), self.clients_path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(CLIENTS_HEADER)
            for record in records:
                self._write_cells(writer, int(record["round"]), table_cells(record))

    def on_round(self, record: Mapping[str, Any]) -> None:
        rnd, row = int(record["round"]), own_numbers(record)
        self.rows.append((rnd, row))
        with writing(self.path):
            if set(row) - set(self.columns):
                self.columns = sorted(set(self.columns) | set(row))
                self._rewrite()
            else:
                with self.path.open("a", newline="", encoding="utf-8") as f:
                    self._write_row(csv.writer(f), rnd, row)
        cells = table_cells(record)
        if cells:
            with writing(self.clients_path), self.clients_path.open("a", newline="", encoding="utf-8") as f:
                self._write_cells(csv.writer(f), rnd, cells)

    def on_end(self, output: Finished) -> None:
        pass

    def close(self, failure: BaseException | None = None) -> None:
        pass

    def _rewrite(self) -> None:
        with self.path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["round", *self.columns])
            for rnd, row in self.rows:
                self._write_row(writer, rnd, row)

    def _write_row(self, writer: Any, rnd: int, row: Mapping[str, int | float]) -> None:
        writer.writerow([rnd, *(repr(row[c]) if c in row else "" for c in self.columns)])

    @staticmethod
    def _write_cells(writer: Any, rnd: int, cells: Sequence[TableCell]) -> None:
        writer.writerows([rnd, key, client, repr(value)] for key, client, value in cells)


def clients_path(path: str | Path) -> Path:
    """Where a CSV sink writing ``path`` puts the tables: beside it, ``_clients`` added to its stem
    (``metrics.csv`` -> ``metrics_clients.csv``)."""
    path = Path(path)
    return path.with_name(f"{path.stem}_clients{path.suffix}")


class TableCell(NamedTuple):
    """One value of a record's table, as a line of ``metrics_clients.csv`` holds it (with the round)."""

    key: str
    client: str
    value: int | float


def own_numbers(record: Mapping[str, Any]) -> dict[str, int | float]:
    """:func:`numbers` without the tables' cells: the record's own numbers, ``metrics.csv``'s columns."""
    return {key: _number(value) for key, value in record.items() if key != "round" and _is_number(value)}


def table_cells(record: Mapping[str, Any]) -> list[TableCell]:
    """The numbers of a record's tables (one level, as :func:`numbers` flattens them), tables in key order and each
    table's entries by :func:`~chillfl.metrics.records.client_order` (as summary.json's stability): a table keyed by client id lists its clients in id order in memory
    (``2, 10``; ints in the aggregator's tables) and in text order once read back from ``metrics.jsonl``, whose keys
    are sorted strings (``"10", "2"``); a resumed run reads its first rounds back, and must write what an
    uninterrupted run writes. For the same reason a table's NaN or infinite value has no line, as ``None`` has none:
    a ``metrics.jsonl`` written before :mod:`chillfl.storage.jsonl` marked values nested in tables (2026-12-06) keeps
    them as ``null``, so a resumed run of such a folder would read them back as ``None`` and lack lines an
    uninterrupted run wrote."""
    cells: list[TableCell] = []
    for key in sorted(k for k, v in record.items() if isinstance(v, Mapping)):
        table = record[key]
        cells += [TableCell(key, str(sub), _number(table[sub])) for sub in sorted(table, key=client_order) if _finite_number(table[sub])]
    return cells


def _finite_number(value: Any) -> bool:
    """:func:`_is_number`, NaN and the infinities left out (:func:`table_cells`)."""
    return _is_number(value) and (isinstance(value, bool) or math.isfinite(value))


class TensorBoardSink:
    """TensorBoard event files under ``folder``: one scalar per key, step = round (needs the ``tensorboard`` extra).

    ``start`` and ``records``: a resumed run's checkpoint round and its rounds up to it, read back from ``metrics.jsonl``.
    The rounds the folder's event files lack are written again first: a hard kill (SIGKILL) loses what the earlier writer
    had buffered (up to 10 events, or 2 minutes' worth), rounds before the checkpoint included. The new event file starts
    with a purge at the first round it writes (``purge_step``), so TensorBoard drops the earlier files' steps from there
    on (the rounds after the checkpoint, trained again, and a round only partly written): each round is shown once, and
    a round the earlier files hold whole is not written twice."""

    def __init__(self, folder: str | Path, start: int = 0, records: Sequence[Mapping[str, Any]] = ()) -> None:
        need("tensorboard", "tensorboard", "TensorBoard logs")
        from torch.utils.tensorboard import SummaryWriter

        self.folder = Path(folder)
        start = max([start, *(int(r["round"]) for r in records)])
        replay = list(records)[logged_rounds(self.folder, records):] if start else []
        purge = int(replay[0]["round"]) if replay else start + 1
        self._hook = _WriterThreadErrors()  # before the writer: its first write is in its constructor
        try:
            with writing(self.folder):
                self.writer: Any = SummaryWriter(log_dir=str(folder), purge_step=purge if start else None)
        except BaseException:
            self._hook.remove()
            raise
        try:
            for record in replay:
                self.on_round(record)
        except BaseException:
            self.close(sys.exc_info()[1])
            raise

    def on_round(self, record: Mapping[str, Any]) -> None:
        step = int(record["round"])
        with writing(self.folder):
            for key, value in scalars(record).items():
                self.writer.add_scalar(key, value, global_step=step)

    def on_end(self, output: Finished) -> None:
        pass

    def close(self, failure: BaseException | None = None) -> None:
        """Flush, then close the writer. The flush raises what the writer's thread met (a full disk), which ``close``
        alone drops: a finished run whose last rounds never reached the event file would say nothing. With a
        ``failure`` on its way out (the run's own error, often this same full disk) it is only logged at debug level:
        the run's line is the one to read, and a resume writes again the rounds the event files lack."""
        try:
            with writing(self.folder):
                try:
                    self.writer.flush()
                finally:
                    self.writer.close()
        except StorageError as exc:
            if failure is None:
                raise
            log.debug("TensorBoard sink closed after the run failed: %s", exc)
        finally:
            self._hook.remove()


class _WriterThreadErrors:
    """While a TensorBoard sink is open, an ``OSError`` that ends TensorBoard's writer thread is not printed.

    The thread keeps what it met and re-raises it; the writer raises it again at its next call (``add_scalar``,
    ``flush``), where :func:`writing` makes it the run's one line. Python's ``threading.excepthook`` printed it as well,
    as ``Exception in thread ...`` and a traceback above that line (70 lines for a full disk). Any other thread's
    exception, or another exception of that thread, goes to the hook that was there before."""

    def __init__(self) -> None:
        self.active = True
        """False once its sink has closed: the hook then passes everything on (another's hook may still call it)."""
        self.previous = threading.excepthook
        threading.excepthook = self.hook

    def hook(self, args: Any) -> None:
        if self.active and isinstance(args.exc_value, OSError) and type(args.thread).__module__.startswith("tensorboard."):
            log.debug("TensorBoard's writer thread stopped: %s", args.exc_value)
            return
        self.previous(args)

    def remove(self) -> None:
        """The filter off; on top, the hook under it back, past the closed sinks' hooks there. Two sinks open at once
        (Python API runs in threads) and closed in the order they opened left the first one's filter installed after
        both had closed: the second put back the hook it had found, the first's, and a later OSError of any TensorBoard
        thread in the process was never printed. Under another's hook it stays in the chain, passing everything on."""
        self.active = False
        if threading.excepthook != self.hook:
            return
        previous = self.previous
        while isinstance(previous, MethodType) and isinstance(previous.__self__, _WriterThreadErrors) and not previous.__self__.active:
            previous = previous.__self__.previous
        threading.excepthook = previous


def logged_rounds(folder: Path, records: Sequence[Mapping[str, Any]]) -> int:
    """How many of ``records``, from the first, the event files in ``folder`` hold whole (each scalar at step = round), as
    TensorBoard reads them: the files in name order (their names start with the time they were opened), a file's
    ``SessionLog.START`` dropping the steps from its own on of the files before it (a resumed writer's ``purge_step``).
    0 when they cannot be read: the rounds are then all written again, which only costs their bytes."""
    try:
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.compat.proto.event_pb2 import SessionLog

        seen: dict[str, set[int]] = {}
        for path in sorted(Path(folder).glob("events.out.tfevents.*")):
            for event in EventFileLoader(str(path)).Load():  # a record torn by a kill ends the file's events
                if event.HasField("session_log") and event.session_log.status == SessionLog.START:
                    seen = {tag: {s for s in steps if s < event.step} for tag, steps in seen.items()}
                for value in event.summary.value:
                    seen.setdefault(value.tag, set()).add(event.step)
    except Exception as exc:  # noqa: BLE001 - unreadable files are rewritten, not a reason to stop the run
        log.debug("TensorBoard files in %s not read (%s): every round up to the checkpoint is written again", folder, exc)
        return 0
    count = 0
    for record in records:
        step = int(record["round"])
        if not all(step in seen.get(key, ()) for key in scalars(record)):
            break
        count += 1
    return count


def wandb_logged_in(env: Mapping[str, str]) -> bool:
    """Whether W&B has credentials here without asking anyone: ``WANDB_API_KEY``, an identity token file, or
    the netrc entry ``wandb login`` writes for the host (``WANDB_BASE_URL``'s, default api.wandb.ai)."""
    if env.get("WANDB_API_KEY") or env.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    host = urlparse(env.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    path = env.get("NETRC") or str(Path("~/.netrc").expanduser())
    try:
        auth = netrc.netrc(path).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return False
    return bool(auth and auth[2])


def wandb_mode(setting: WandbMode, env: Mapping[str, str], logged_in: bool) -> str | None:
    """The ``mode`` to give ``wandb.init`` for ``setting``. ``auto``: ``WANDB_MODE`` when set (passed on explicitly:
    W&B reads its environment once a process, so a later run would not see a change); else None, W&B's own default
    (online, or what ``wandb offline`` saved), with an API key; else ``offline``: W&B would otherwise prompt for a key,
    or fail, in the middle of a run."""
    if setting != "auto":
        return setting
    if env.get("WANDB_MODE"):
        return env["WANDB_MODE"]
    return None if logged_in else "offline"


def final_folder(folder: Path) -> Path:
    """Where a run writing into ``folder`` ends up: the run folder without ``.partial``, and a comparison's run (its
    folder inside ``NAME-compare.partial``) inside the comparison's folder without it too. What a sink names for later
    (MLflow's ``chillfl.folder`` tag, W&B's ``wandb sync`` line): the ``.partial`` folders are gone by then."""
    folder = Path(folder).resolve()
    run = folder.name.removesuffix(PARTIAL)
    parent = comparison_folder(folder)
    return (parent.with_name(parent.name.removesuffix(PARTIAL)) if parent is not None else folder.parent) / run


def comparison_folder(folder: Path) -> Path | None:
    """The comparison's folder holding the run folder ``folder`` (it has ``sweep.json``), or None for a run of its own."""
    from chillfl.storage.run_folder import is_sweep  # the folder's naming; imports torch, which this module does not need

    parent = Path(folder).resolve().parent
    return parent if is_sweep(parent) else None


def comparison_name(folder: Path) -> str | None:
    """The name of the comparison that ``folder`` is a run of (its W&B group, its MLflow ``chillfl.comparison`` tag):
    :func:`comparison_label` of its folder without ``.partial``."""
    parent = comparison_folder(folder)
    return None if parent is None else comparison_label(parent.with_name(parent.name.removesuffix(PARTIAL)))


def comparison_label(folder: Path) -> str:
    """``NAME-compare@<8 hex digits>`` for the comparison folder ``folder``: its name (``-2``, ... when that was taken in
    its ``out_dir``) and a hash of its ``out_dir``'s absolute path, so that two comparisons logging to one W&B project or
    MLflow experiment can be told apart. The name alone could not: the same comparison run again into another ``out_dir``
    (``results-v2/`` after a code change) had the same name, and W&B mixed both in one group. The ``out_dir``, not the
    folder: a comparison whose every run failed is renamed ``NAME-compare.failed`` and keeps its hash."""
    folder = Path(folder).resolve()
    return f"{folder.name}@{hashlib.sha256(str(folder.parent).encode('utf-8')).hexdigest()[:8]}"


class WandbSink:
    """A Weights & Biases run, its files under ``folder/wandb`` (needs the ``wandb`` extra); ``mode``: see :func:`wandb_mode`.

    ``records``: a resumed run's rounds up to its checkpoint, read back from ``metrics.jsonl``, logged first at their
    steps: the run before the resume may hold none of them (a hard kill loses what W&B's service had buffered), so the
    resumed W&B run holds every round by itself. A comparison's run is in the W&B group of the comparison's name."""

    def __init__(
        self, folder: str | Path, name: str, config: Mapping[str, Any], project: str = "chillfl", mode: WandbMode = "auto",
        records: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        wandb = need("wandb", "wandb", "W&B logs")
        chosen = wandb_mode(mode, os.environ, mode == "auto" and wandb_logged_in(os.environ))
        if chosen == "offline" and mode == "auto":  # why: WANDB_MODE says so (a key may be set), or there is no key
            why = "WANDB_MODE=offline" if os.environ.get("WANDB_MODE") == "offline" else "W&B has no API key (`wandb login`)"
            log.info("%s: %s", why, offline_line(Path(folder)))
        mode_setting = {} if chosen is None else {"mode": chosen}  # no mode: W&B's own (its env, settings file, login)
        settings = wandb.Settings(**mode_setting, console="off", silent=True, save_code=False, x_disable_stats=True, x_disable_meta=True)
        self.run: Any = wandb.init(dir=str(folder), project=project, name=name, config=dict(config), settings=settings, reinit="create_new",
                                   group=comparison_name(Path(folder)))
        self._closed = False
        self._offline = bool(self.run.offline)
        self._final = final_folder(Path(folder))  # where the run's files were said to end up
        try:
            for record in records:
                self.on_round(record)
        except BaseException as exc:
            self.close(exc)
            raise
        if not self.run.offline and not getattr(self.run, "disabled", False):  # online: where to watch it (offline, `url` warns)
            log.info("W&B run: %s", self.run.url)

    def on_round(self, record: Mapping[str, Any]) -> None:
        self.run.log(scalars(record), step=int(record["round"]))

    def on_end(self, output: Finished) -> None:
        """An offline run whose folder ended elsewhere than :func:`final_folder` guessed at its start (``NAME`` appeared
        meanwhile: the run is ``NAME-2``): one line naming where ``wandb sync`` finds it."""
        if output.folder is None or not self._offline:
            return
        final = final_folder(output.folder)
        if final != self._final:
            log.info("W&B's offline run is in %s, not under %s: `wandb sync %s/offline-run-*` uploads it", final / "wandb", self._final, final / "wandb")

    def close(self, failure: BaseException | None = None) -> None:
        """Finish the W&B run: exit code 1 when an exception propagates (diverged, interrupted), so W&B shows it failed."""
        if not self._closed:
            self._closed = True
            self.run.finish(exit_code=1 if failure is not None else None)  # None: W&B's own, 0


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as MLflow params: ``{"client": {"lr": 0.1}}`` -> ``{"client.lr": "0.1"}``; strings as they are,
    everything else as JSON (``true``, ``null``, ``[1, 2]``); an empty table gives nothing; values cut at ``MLFLOW_PARAM_MAX``."""
    out: dict[str, str] = {}
    for key, value in config.items():
        field = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flat_params(value, field + "."))
            continue
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
        out[field] = text if len(text) <= MLFLOW_PARAM_MAX else text[: MLFLOW_PARAM_MAX - 3] + "..."
    return out


class MlflowSink:
    """An MLflow run (needs the ``mlflow`` extra): the config as params, every round's scalars at step = round,
    and at the end the run folder's small files as artefacts. ``tracking_uri``: ``""`` is MLflow's own choice.

    Tagged ``chillfl.folder`` (the run's final folder, :func:`final_folder`, set again at ``on_end`` from the folder the
    run got), ``chillfl.host`` and, for a comparison's run, ``chillfl.comparison`` (:func:`comparison_name`); its id is
    added to the folder's ``MLFLOW_RUNS``. ``records``: a resumed run's rounds up to its checkpoint, logged first, as
    for W&B, so the resumed MLflow run (tagged ``chillfl.resumed_at``) holds every round; the folder's earlier runs
    still RUNNING (the process was killed before it could end them) are set KILLED."""

    def __init__(
        self, folder: str | Path, name: str, config: Mapping[str, Any], experiment: str = "chillfl", tracking_uri: str = "", start: int = 0,
        records: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        need("mlflow", "mlflow", "MLflow logs")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client: Any = MlflowClient(tracking_uri=tracking_uri or None)
        found = self.client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found is not None else self.client.create_experiment(experiment)
        folder = Path(folder)
        final, comparison = final_folder(folder), comparison_name(folder)
        if start:
            self._kill_stale(folder, experiment_id, {str(final), str(folder.resolve())})  # the .partial one: an older chillfl's tag
        tags = ({"chillfl.folder": str(final), "chillfl.host": socket.gethostname()} | ({"chillfl.comparison": comparison} if comparison else {})
                | ({"chillfl.resumed_at": str(start)} if start else {}))
        self.run_id: str = self.client.create_run(experiment_id, run_name=name, tags=tags).info.run_id
        self.folder_tag = str(final)
        self._closed = False
        try:
            if folder.is_dir():  # a folder given from Python that does not exist is only a tag
                record_mlflow_run(folder, MlflowRun(self.run_id, self.client.tracking_uri))
            params = [Param(k, v) for k, v in flat_params(config).items()]
            for i in range(0, len(params), 100):  # MLflow takes at most 100 params a batch
                self.client.log_batch(self.run_id, params=params[i : i + 100])
            self._log(records)
        except BaseException as exc:
            self.close(exc)
            raise
        log.info("MLflow run %s (experiment %r) in %s", self.run_id, experiment, self.client.tracking_uri)

    def _kill_stale(self, folder: Path, experiment_id: str, paths: set[str]) -> None:
        """End as KILLED the folder's earlier runs still RUNNING: a resumed run's folder is locked while it runs, so such a
        run's process is gone (a hard kill, a lost machine) and MLflow would show it running for ever.

        The runs are the ones the folder's ``MLFLOW_RUNS`` names, not every run tagged with its path: another machine can
        have a folder at the same path, and a live run of it in the same store. A folder without that file was started by
        an older chillfl, which tagged no host: its runs are found by path (``paths``), only those without ``chillfl.host``
        (a run that has one is in its own folder's file)."""
        from mlflow.exceptions import MlflowException

        recorded = read_mlflow_runs(folder)
        if recorded is not None:
            for run_id in {r.run_id for r in recorded if r.tracking_uri == self.client.tracking_uri}:
                try:
                    run = self.client.get_run(run_id)
                except MlflowException as exc:
                    if exc.error_code != "RESOURCE_DOES_NOT_EXIST":  # removed from the store since (`mlflow gc`)
                        raise
                    continue
                if run.info.status == "RUNNING" and run.info.lifecycle_stage == "active":
                    self.client.set_terminated(run_id, status="KILLED")
            return
        token = None
        while True:
            page = self.client.search_runs([experiment_id], filter_string="attributes.status = 'RUNNING'", max_results=1000, page_token=token)
            for run in page:
                if run.data.tags.get("chillfl.folder") in paths and "chillfl.host" not in run.data.tags:
                    self.client.set_terminated(run.info.run_id, status="KILLED")
            token = page.token
            if not token:
                return

    def on_round(self, record: Mapping[str, Any]) -> None:
        self._log([record])

    def _log(self, records: Sequence[Mapping[str, Any]]) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(k, v, stamp, int(r["round"])) for r in records for k, v in scalars(r).items()]
        for i in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics a batch
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def on_end(self, output: Finished) -> None:
        """The finished run's folder (renamed from ``.partial`` by now): its files up to ``ARTIFACT_MAX_BYTES``, and its
        path as ``chillfl.folder`` where the guess at the start was wrong (``NAME`` appeared meanwhile: the run is ``NAME-2``)."""
        if output.folder is None:
            return
        final = str(final_folder(output.folder))  # a comparison's run: in the comparison's folder once that is renamed
        if final != self.folder_tag:
            self.client.set_tag(self.run_id, "chillfl.folder", final)
            self.folder_tag = final
        for path in sorted(output.folder.iterdir()):
            if path.is_file() and path.name not in NOT_ARTIFACTS and path.stat().st_size <= ARTIFACT_MAX_BYTES:
                self.client.log_artifact(self.run_id, str(path))

    def close(self, failure: BaseException | None = None) -> None:
        if self._closed:
            return
        self._closed = True
        exc = failure  # the run did not finish
        interrupted = isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "RunInterrupted"
        failed = getattr(exc, "folder", None) if isinstance(exc, Diverged) else None  # renamed NAME.failed before the sinks close
        if isinstance(failed, Path):
            self.client.set_tag(self.run_id, "chillfl.folder", str(final_folder(failed)))
        self.client.set_terminated(self.run_id, status="FINISHED" if exc is None else "KILLED" if interrupted else "FAILED")


class MlflowRun(NamedTuple):
    """One MLflow run a run folder started (an entry of its ``MLFLOW_RUNS``)."""

    run_id: str
    tracking_uri: str


def read_mlflow_runs(folder: Path) -> list[MlflowRun] | None:
    """The MLflow runs ``folder``'s ``MLFLOW_RUNS`` names; None without one (an older chillfl's folder) or when it cannot be read."""
    try:
        data = json_loads((Path(folder) / MLFLOW_RUNS).read_text(encoding="utf-8"))
        return [MlflowRun(str(r["run_id"]), str(r["tracking_uri"])) for r in data["runs"]]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.warning("%s not read (%s): the folder's MLflow runs are found by its path", Path(folder) / MLFLOW_RUNS, exc)
        return None


def record_mlflow_run(folder: Path, run: MlflowRun) -> None:
    """Add ``run`` to ``folder``'s ``MLFLOW_RUNS`` (replaced whole, atomically: a kill leaves the old record or the new)."""
    from chillfl.storage.checkpoint import write_atomic  # imports torch, which this module does not need

    runs = [*(read_mlflow_runs(folder) or []), run]
    text = json.dumps({"runs": [r._asdict() for r in runs]}, indent=2) + "\n"
    write_atomic(Path(folder) / MLFLOW_RUNS, text.encode("utf-8"))


def comparison_ended(folder: Path) -> None:
    """Tell the sinks of the comparison renamed ``folder`` where its runs are now, which is not where they were told at
    their start: every run failed, and the comparison ended ``NAME-compare.failed`` (or ``.failed-2``, ...). Each run's
    MLflow runs (its ``MLFLOW_RUNS``) are tagged again, ``chillfl.folder`` with the run's folder and ``chillfl.comparison``
    with the comparison's :func:`comparison_label`; offline W&B runs get one line saying where ``wandb sync`` finds them. A store
    that cannot be reached (or an ``mlflow`` package missing here) costs a warning: the comparison's own error goes on."""
    folder = Path(folder).resolve()
    clients: dict[str, Any] = {}
    for record in sorted(folder.glob(f"*/{MLFLOW_RUNS}")):
        for run in read_mlflow_runs(record.parent) or []:
            try:
                if run.tracking_uri not in clients:
                    need("mlflow", "mlflow", "MLflow logs")
                    from mlflow.tracking import MlflowClient

                    clients[run.tracking_uri] = MlflowClient(tracking_uri=run.tracking_uri)
                clients[run.tracking_uri].set_tag(run.run_id, "chillfl.folder", str(record.parent))
                clients[run.tracking_uri].set_tag(run.run_id, "chillfl.comparison", comparison_label(folder))
            except Exception as exc:  # noqa: BLE001 - the tags are a convenience; the comparison's failure is what is reported
                log.warning("MLflow run %s (%s) not tagged with its folder %s: %s", run.run_id, run.tracking_uri, record.parent, one_line(exc))
    if any(folder.glob("*/wandb/offline-run-*")):
        log.info("W&B's offline runs of the comparison are under %s: `wandb sync %s/*/wandb/offline-run-*` uploads them", folder, folder)


def offline_line(folder: Path) -> str:
    """Where an offline W&B run's files end up and how to upload them: a ``.partial`` run folder (and a comparison's)
    loses its suffix once it completes, so the folder named while it runs is gone by the time ``wandb sync`` is typed."""
    final = final_folder(folder) / "wandb"
    what = "the comparison completes" if comparison_folder(folder) is not None else "the run completes"
    under = f" (under {folder} until {what})" if Path(folder).resolve() / "wandb" != final else ""
    return f"logging offline into {final}{under}; `wandb sync {final}/offline-run-*` uploads it"


def build_sinks(
    names: Sequence[str], folder: Path, name: str, config: Mapping[str, Any], records: Sequence[Mapping[str, Any]] = (), project: str = "chillfl",
    *, wandb_mode: WandbMode = "auto", mlflow_tracking_uri: str = "", mlflow_experiment: str = "chillfl",
) -> list[Sink]:
    """The sinks ``names`` of a run writing into ``folder``; ``records``: the rounds already done (resume), which the
    CSV, W&B and MLflow sinks log first (TensorBoard those its earlier event files lack)."""
    start = int(records[-1]["round"]) if records else 0
    config = logged_config(config, folder)
    sinks: list[Sink] = []
    try:
        for sink in names:
            if sink == "csv":
                sinks.append(CsvSink(folder / CSV_FILE, records))
            elif sink == "tensorboard":
                sinks.append(TensorBoardSink(folder / TENSORBOARD_DIR, start, records))
            elif sink == "wandb":
                sinks.append(WandbSink(folder, name, config, project, wandb_mode, records))
            elif sink == "mlflow":
                sinks.append(MlflowSink(folder, name, config, mlflow_experiment, mlflow_tracking_uri, start, records))
            else:  # validated in the config already
                raise ValueError(f"unknown sink {sink!r}")
    except BaseException as exc:
        close_sinks(sinks, exc)
        raise
    return sinks


def logged_config(config: Mapping[str, Any], folder: Path) -> Mapping[str, Any]:
    """The config a sink logs (W&B's config, MLflow's params): a comparison's run's ``out_dir`` is the comparison's
    ``NAME-compare.partial`` while it runs, and names the final folder once it has (its ``config.toml`` is rewritten so,
    ``point_saved_configs_to``); logged as it was, the tracker named a folder that no longer exists. Spelled as given
    (relative stays relative), as ``config.toml`` spells it."""
    out_dir = config.get("out_dir")
    if not isinstance(out_dir, str) or comparison_folder(folder) is None or not Path(out_dir).name.endswith(PARTIAL):
        return config
    return {**config, "out_dir": str(Path(out_dir).with_name(Path(out_dir).name.removesuffix(PARTIAL)))}


MLFLOW_PROBE_ENV = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""MLflow's retry settings with which :func:`check_mlflow_store` asks a server, where the user set none of their own: one
try, 10 s at most. MLflow's own (7 tries, exponential back-off) held a run ~4 minutes on a server that is down before it
said so. A value the user set is kept (a server known to answer in 11 s was refused under the forced 10 s: rev116d 4).
Passed to the request, never set in ``os.environ``: set there for up to 10 s, another thread's MLflow sink (a parallel
comparison's run) logged under one try."""

MLFLOW_GET_BY_NAME = "/api/2.0/mlflow/experiments/get-by-name"
"""The REST endpoint MLflow's client asks an experiment by name at (``RestStore.get_experiment_by_name``)."""


def mlflow_server(uri: str) -> bool:
    """Whether the MLflow store ``uri`` is a tracking server (http, https), which a probe asks over HTTP and which
    nothing asked creates; every other store (``sqlite:``, ``file:``, a bare path, a database URL) MLflow creates, or
    migrates, where it is opened."""
    return urlparse(uri).scheme.lower() in ("http", "https")


def check_mlflow_store(tracking_uri: str, experiment: str, dry_run: bool = False) -> None:
    """Ask the MLflow store ``tracking_uri`` (``""``: MLflow's own choice) for ``experiment`` once, before the run folder
    is made: a store MLflow refuses (a ``file:`` store without ``MLFLOW_ALLOW_FILE_STORE=true``), a scheme it does not
    know or a server that is down is a ConfigError line naming ``log.mlflow_tracking_uri`` (exit 2). Found when the sink
    started, it was a traceback with a ``.partial`` folder left behind, which the next run stepped around (``NAME-2``)
    and ``chillfl resume`` refused. No experiment is created: one that does not exist yet is the sink's to create.

    ``dry_run``: a dry run writes nothing, and opening a store that is no server creates it (a ``sqlite:///`` database,
    a ``file:`` folder): only a server is asked; of any other store one warning line says it was not checked (shown
    under ``-q``, as the dry run's other notes; ``-qq`` hides it).
    A server is asked with :data:`MLFLOW_PROBE_ENV`'s retry settings passed to the request: ``os.environ`` is not touched.

    A stop signal (Ctrl-C, SIGTERM) while it waits is not caught here: it stops the command at once."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    if not uri:  # MLflow's default: a local sqlite:///mlflow.db
        return  # the run makes it where it runs; asked now, a dry run left ./mlflow.db behind
    need("mlflow", "mlflow", "MLflow logs")
    where = repr(tracking_uri) if tracking_uri else "MLflow's default ($MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"
    if dry_run and not mlflow_server(uri):
        # a note, as the dry run's others: it survives -q (an INFO line was hidden there, where a user checks a store with a dry run)
        warn_once(log, f"the MLflow store {where} is not checked on a dry run (opening it would create it); the run checks it before "
                       "its folder is made", key=f"mlflow dry run {uri}")
        return
    ask = _mlflow_request() if mlflow_server(uri) else None
    settings = _probe_settings(ask) if ask is not None else None
    try:
        if ask is not None and settings is not None:
            _ask_mlflow_server(ask, uri, experiment, *settings)
        else:  # no HTTP (no retry settings to pass), or an MLflow without the request helpers: its client, its retries
            from mlflow.tracking import MlflowClient

            MlflowClient(tracking_uri=uri).get_experiment_by_name(experiment)
    except Exception as exc:  # noqa: BLE001 - whatever the store says (MlflowException, an OSError, requests'), one line
        text = str(exc)
        if "MLFLOW_ALLOW_FILE_STORE" in text:
            why = "MLflow refuses a file store unless MLFLOW_ALLOW_FILE_STORE=true is set; or give a sqlite:///PATH/mlflow.db URI"
        elif "Connection refused" in text or "Failed to establish a new connection" in text:
            why = "no MLflow server answers there (connection refused)"
        elif "timeout" in text.lower() or "timed out" in text.lower():
            why = f"no answer within {settings[1]} s" if settings else "no answer within MLflow's time limit (MLFLOW_HTTP_REQUEST_TIMEOUT)"
        else:  # MLflow's first sentence (its messages go on with links and advice)
            why = one_line(text.split(". ")[0].split(" (Caused by")[0]).strip()[:300]
        raise ConfigError("log.mlflow_tracking_uri", f"the MLflow store {where} cannot be used: {why}") from exc


class _MlflowRequest(NamedTuple):
    """MLflow's pieces :func:`_ask_mlflow_server` asks a server with (MLflow's functions are untyped)."""

    max_retries: Any  # the MLFLOW_HTTP_REQUEST_MAX_RETRIES setting
    timeout: Any  # the MLFLOW_HTTP_REQUEST_TIMEOUT setting
    host_creds: Any  # get_default_host_creds(uri)
    http_request: Any
    verify: Any  # verify_rest_response


def _mlflow_request() -> _MlflowRequest | None:
    """:class:`_MlflowRequest` from this MLflow; None where it lacks one of them (they are MLflow's internals, which a
    release after 3.18 may move: the probe then asks through MLflow's client, with MLflow's own retries, rather than
    refuse a store that works)."""
    try:
        from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT
        from mlflow.tracking._tracking_service.utils import get_default_host_creds
        from mlflow.utils.rest_utils import http_request, verify_rest_response
    except ImportError:
        return None
    return _MlflowRequest(MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT, get_default_host_creds, http_request, verify_rest_response)


def _probe_settings(ask: _MlflowRequest) -> tuple[int, int]:
    """The retries and timeout (seconds) a probe asks with: the user's, parsed as MLflow parses them, else
    :data:`MLFLOW_PROBE_ENV`'s. Known before the request, so that a request that times out is said with its own."""
    retries = ask.max_retries.get() if ask.max_retries.defined else int(MLFLOW_PROBE_ENV["MLFLOW_HTTP_REQUEST_MAX_RETRIES"])
    timeout = ask.timeout.get() if ask.timeout.defined else int(MLFLOW_PROBE_ENV["MLFLOW_HTTP_REQUEST_TIMEOUT"])
    return int(retries), int(timeout)


def _ask_mlflow_server(ask: _MlflowRequest, uri: str, experiment: str, retries: int, timeout: int) -> None:
    """Ask the server ``uri`` for ``experiment`` as MLflow's client does (its credentials from the environment, as the
    sink's), with ``retries`` and ``timeout`` passed to the request (:func:`_probe_settings`); raises what MLflow raises
    for an answer that is no experiment nor "no such experiment"."""
    from mlflow.exceptions import MlflowException

    response = ask.http_request(ask.host_creds(uri), MLFLOW_GET_BY_NAME, "GET", max_retries=retries, timeout=timeout,
                                raise_on_status=False, params={"experiment_name": experiment})
    try:
        ask.verify(response, MLFLOW_GET_BY_NAME)
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_DOES_NOT_EXIST":  # no such experiment yet: the sink creates it
            raise


def close_sinks(sinks: Sequence[Sink], failure: BaseException | None = None) -> None:
    """Close every sink (each once; a failing one does not keep the others open); ``failure``: see :class:`Sink`."""
    errors = []
    for sink in sinks:
        try:
            sink.close(failure)
        except Exception as exc:  # noqa: BLE001 - close the rest, then report the first
            errors.append(exc)
    if errors:
        raise errors[0]

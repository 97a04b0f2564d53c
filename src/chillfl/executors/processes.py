"""Process executor: a pool of worker processes, tensors exchanged through shared memory.

Each worker (``spawn`` start method, so it is safe with threads and on every
OS) runs :func:`~chillfl.training.local.train_client` on the jobs it pulls
from a shared queue. The model template, the :class:`LocalSpec` and the
client side are pickled once per executor into shared memory (:class:`_Setup`);
every task refers to them, and a worker unpickles them the first time it meets
them. So the workers (a :class:`WorkerPool`) do not belong to one run: a pool
can serve one executor after another, and a sweep or a test of many runs
starts its workers (seconds each: they import torch) once.

Jobs and results travel as small pickles whose tensors live in shared
memory: every distinct state dict (the round's global model is one object
shared by all clients) is packed once per round into one flat shared buffer
per dtype, so a worker maps it instead of receiving a
copy. Results are collected by job index and returned in job order; a job's
outcome depends only on the job (its own seed), never on which worker ran it.

Determinism: a worker runs with ``threads_per_worker`` intra-op threads (a run's
``threads``; 1 by default). Results are bitwise identical to the sequential executor run in a
process with the same number of intra-op threads (``torch.set_num_threads``);
with a different thread count, reductions may sum in a different order and
results agree only up to float rounding.

Choices
-------
* Clients' data (``job.x``, ``job.y``) are moved into shared memory in place
  (``share_memory_``), so a dataset whose clients are views of one tensor is
  shared once and for all; fresh per-round copies are moved each round.
* At most ``2 * workers`` jobs are in flight, which bounds both memory and the
  number of open shared-memory file descriptors whatever the round size.
* Spawned workers re-import the parent's main script, so a script that
  uses this executor needs the usual ``if __name__ == "__main__":`` guard
  (``python -m chillfl`` and the ``chillfl`` command are fine).
* A worker that finds its parent gone (SIGKILL: no handler runs) stops, and
  removes the parent's multiprocessing temp folder (``pymp-*``, which holds
  the parent's resource-sharer socket), so a killed run leaves nothing in
  the temp directory. A watchdog thread in each worker looks every
  ``_WATCH_S`` seconds, also in the middle of a job (between its steps, or
  inside one long kernel): an orphaned worker is gone within a second, not
  when its job ends. It ends with ``os._exit`` (no multiprocessing finalizer
  races a sibling's removal of that folder) and prints no error of its own
  once orphaned (a fetch of its result cut by the kill resets its resource
  sharer's socket), so the killed run's terminal shows no traceback.
* A failing job (the client's own code raised) raises :class:`ClientCodeError` in the parent
  (with the worker's traceback) after the round's other jobs have been drained, so the pool stays
  usable; a worker that dies breaks the pool, which is then shut down, with one
  :class:`WorkerError` line whatever the worker was doing: a result whose fetch its death cut
  (a reset socket) is that dead worker, the parent's resource sharer is quiet about a fetch of
  a task cut short (:func:`_quiet_resource_sharer`), and a worker that cannot allocate memory
  (a task's tensors it cannot map, a MemoryError) exits with :data:`OUT_OF_MEMORY_EXIT`, no
  traceback, and the line says it ran out of memory, quoting the error's first line (torch's
  "you tried to allocate N bytes"), which the worker leaves in the pool's temp folder. A
  :class:`~chillfl.errors.ConfigError` (bad input only a client can see, such as
  a context key a loss term reads and the client lacks) is raised as itself, so
  the command line still ends with one line and exit 2. Of several failing
  updates, the one raised is the one a sequential run would meet first: each
  worker reports how far its update got (:class:`_Stage`), and the earliest
  stage, then the lowest job, is raised.
* A worker that hangs (stopped, deadlocked in a client's code) is alive, so the round waits for
  it; after :data:`STALL_S` without a result one warning line names the workers still busy and
  their clients (each worker notes its client in a shared array), again after twice as long
  (:class:`StallClock`: a round's first after twice the previous round's longest wait).
* A queue pickles what it sends in a thread of its own, where an error is only
  printed: a task that cannot be sent breaks the pool with a
  :class:`WorkerError` naming why, and a result that cannot be sent comes back
  as its job's error, so a round never waits for an item that never left.
* Tensors travel as file descriptors passed over an ``AF_UNIX`` socket in
  multiprocessing's temp folder, and a socket path has at most 107 bytes: under
  a ``TMPDIR`` longer than about 75 characters the sockets go to a short system
  folder (``/tmp``), with one warning (:func:`short_socket_folder`).
"""

from __future__ import annotations

import copy
import dataclasses
import errno
import itertools
import gc
import contextlib
import logging
import multiprocessing.queues as mp_queues
import multiprocessing.util as mp_util
import os
import pickle
import queue
import signal
import sys
import tempfile
import threading
import time
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.multiprocessing as tmp
from torch import nn

from chillfl.environment import usable_cores
from chillfl.errors import ConfigError
from chillfl.executors.parent_watch import WATCH_S, Watched, remove_parent_temp, watch_parent
from chillfl.executors.sequential import ClientJob, train_job
from chillfl.engine.protocol import ClientReply, ClientSide, ClientTask, drive_tasks, predict_each
from chillfl.training.linear_factors import factored_linears
from chillfl.training.local import LocalOutcome, LocalSpec, pin_worker
from chillfl.training.optim import Carried
from chillfl.stop_signals import STOP_SIGNALS

_POLL_S = 0.5
_JOIN_S = 5.0
STALL_S = 60.0
"""Seconds without any result after which a round says which workers it waits for; again after twice as long, and so on.

A worker stopped (SIGSTOP) or deadlocked in a client's code passes every liveness check, and the round waited for it
with no output at all: a cluster job burnt its allocation in silence. The notice changes nothing else: the round still
waits (a legitimately slow client is no error). When it comes: :class:`StallClock`."""


class StallClock:
    """When a round that waits without a result says so: after ``first * 2**n`` s, ``n`` the round's notices so far, and
    ``first`` twice the previous round's longest wait for a result, at least :data:`STALL_S`.

    Why adaptive: a full-size run whose clients take minutes each waited over STALL_S every round, and named its busy
    workers every round as if they hung; twice its own usual wait is what a hang stands out from. Why per round: counted
    over a pool's life, the doubling named a hang in a long sweep's later run only after ``STALL_S * 2**n``, ``n`` every
    earlier round's notices. One round's outlier (a hang the user continued) sets only the next round's ``first``."""

    def __init__(self) -> None:
        self._previous = 0.0  # the last completed round's longest wait for a result
        self._longest = 0.0
        self._first = STALL_S
        self._notices = 0

    def start_round(self) -> None:
        self._first = max(STALL_S, 2.0 * self._previous)
        self._longest, self._notices = 0.0, 0

    def result(self, waited: float) -> None:
        """A result came after ``waited`` s without one."""
        self._longest = max(self._longest, waited)

    def end_round(self) -> None:
        self._previous = self._longest

    def due(self, waited: float) -> bool:
        """Whether ``waited`` s without a result is the round's next notice (counted as said when True)."""
        if waited < self._first * 2**self._notices:
            return False
        self._notices += 1
        return True
_WATCH_S = WATCH_S
AF_UNIX_PATH_MAX = 103 if sys.platform == "darwin" else 107
"""Longest socket path the OS accepts (``sockaddr_un.sun_path`` is 108 bytes on Linux, 104 on macOS, with its NUL)."""
_SOCKET_TAIL = len("/pymp-abcdefgh/listener-abcdefgh")
"""What multiprocessing adds to its temp folder's parent for its resource-sharer socket."""
TMPDIR_MAX = AF_UNIX_PATH_MAX - _SOCKET_TAIL
"""The longest temp folder (bytes) whose sockets fit: 75 on Linux."""
SHORT_FOLDERS = ("/tmp", "/var/tmp", "/usr/tmp")

log = logging.getLogger(__name__)


def _fits(folder: str) -> bool:
    return len(os.fsencode(folder)) <= TMPDIR_MAX


def _main_file() -> str | None:
    """``__main__.__file__``: absent for a notebook or ``python -c``, ``"<stdin>"`` for ``python - < script.py``."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    return path if isinstance(path, str) else None


def main_importable() -> bool:
    """Whether a spawned worker can import this process's ``__main__``: a script file it can run again
    (a worker given ``"<stdin>"`` would try to open it: ``FileNotFoundError`` in every worker)."""
    path = _main_file()
    return path is not None and os.path.isfile(path)


@contextlib.contextmanager
def _unimportable_main_hidden() -> Iterator[None]:
    """While workers start: a ``__main__`` whose file does not exist (``<stdin>``) is left out, as an interactive one is.

    Spawn re-runs ``__main__.__file__`` in every worker unless it is absent; the workers need nothing of it
    (whatever the parent sends them by reference from such a ``__main__`` is refused first: ``unsendable``).
    """
    main, path = sys.modules.get("__main__"), _main_file()
    if main is None or path is None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def short_socket_folder(warn: bool = True) -> str:
    """This process's multiprocessing temp folder (``pymp-*``), made in a short folder if ``TMPDIR`` is too long for a socket.

    A tensor sent to or from a worker is a file descriptor passed over a socket in that folder; a path too long
    to bind fails in a queue's feeder thread. Call it before anything else asks for the folder: once made, it stays.
    """
    base = tempfile.gettempdir()
    if _fits(base):
        return mp_util.get_temp_dir()
    short = next((f for f in SHORT_FOLDERS if _fits(f) and os.path.isdir(f) and os.access(f, os.W_OK | os.X_OK)), None)
    if short is None:
        raise WorkerError(
            f"TMPDIR {base!r} ({len(base)} characters) is too long for the sockets that pass tensors to worker processes, "
            f"and none of {', '.join(SHORT_FOLDERS)} is writable: set TMPDIR to a folder of at most {TMPDIR_MAX} bytes"
        )
    saved = tempfile.tempdir
    tempfile.tempdir = short  # get_temp_dir() makes its folder under tempfile's choice, once
    try:
        folder = mp_util.get_temp_dir()
    finally:
        tempfile.tempdir = saved
    if not _fits(os.path.dirname(folder)):
        raise WorkerError(f"multiprocessing's temp folder {folder!r} was made before the worker pool, under a TMPDIR too long for its sockets: set TMPDIR to a folder of at most {TMPDIR_MAX} bytes")
    if warn:
        log.warning("TMPDIR (%d characters) is too long for the sockets that pass tensors to worker processes: they are made in %s", len(base), short)
    return folder


class _Tasks(mp_queues.Queue):  # type: ignore[type-arg]
    """The parent's task queue: remembers a task its feeder thread could not send, for the round to raise."""

    unsent: str | None = None

    def _on_queue_feeder_error(self, e: BaseException, obj: object) -> None:
        self.unsent = f"{type(e).__name__}: {e}"


class _Results(mp_queues.Queue):  # type: ignore[type-arg]
    """A worker's result queue: a result its feeder thread cannot send is replaced by its job's error."""

    def _on_queue_feeder_error(self, e: BaseException, obj: object) -> None:
        index = obj[0] if isinstance(obj, tuple) and obj else -1
        self.put((index, False, f"could not send the result to the parent: {type(e).__name__}: {e}"))


class WorkerError(RuntimeError):
    """A worker was lost (it died, ran out of memory, could not be reached): the round was not aggregated.

    Not the run's result: the run's last checkpoint resumes it (a comparison stops, resumable, rather than
    mark the run failed). ``folder``: what ``chillfl resume`` goes on with, where the raiser's caller knows it.
    """

    folder: Path | None = None
    run: str | None = None
    """The lost run's name where it was one of several (a comparison's)."""


class ClientCodeError(WorkerError):
    """A client's own code (a loss term, a client update) raised in a worker: the run's failure, as it would be in-process.

    ``ran_in``: where that code ran, as the command line's line says it ("raised in a Ray actor"): the raiser knows,
    and the line then names no executor."""

    def __init__(self, message: str, ran_in: str = "a worker process") -> None:
        super().__init__(message)
        self.ran_in = ran_in  # kept by pickling: an exception's __dict__ travels with its args


OUT_OF_MEMORY_EXIT = 75
"""A worker's exit status when it could not allocate memory (MemoryError, ENOMEM): the parent's one line says so."""

_NOTE_CHARS = 400
"""At most this much of an out-of-memory error's first line goes to the parent (torch's names the bytes it asked for)."""


def stalled_line(busy: Sequence[str], waited: float, kind: str = "worker") -> str:
    """The notice for a round with no result for ``waited`` s, naming the ``busy`` workers (and their clients).

    A stopped or deadlocked worker is alive: no liveness check sees it, and the round waited for it in silence."""
    who = f"{kind}{'s' if len(busy) > 1 else ''} {', '.join(busy)}" if busy else f"the {kind}s"
    return (f"no result from {who} for {waited:.0f} s; the round waits for {'it' if len(busy) == 1 else 'them'} with no time limit "
            "(one stopped or stuck in a client's code never replies: two Ctrl-C stop the run)")


def _memory_note(folder: str, pid: int) -> str:
    """Where worker ``pid`` leaves the first line of its out-of-memory error, in the pool's temp folder, for the parent.

    A file, not a result on the queue: the worker writes it before it exits, so the parent that sees the exit status
    finds it (a queued item could still be in the pipe), and writing a short line needs no pickling."""
    return os.path.join(folder, f"out-of-memory-{pid}")


def _exit_out_of_memory(exc: BaseException, folder: str) -> None:
    """End this worker with :data:`OUT_OF_MEMORY_EXIT`, leaving the error's first line for the parent's message.

    The parent's line said "MemoryError: Cannot allocate memory" whatever was asked: torch's own text ("you tried to
    allocate 4000000000000 bytes") tells a model that always asks too much from a machine that was full."""
    try:
        line = (str(exc).strip().splitlines() or [""])[0]
        text = f"{type(exc).__name__}: {line}" if line else type(exc).__name__
        with open(_memory_note(folder, os.getpid()), "w", encoding="utf-8") as note:
            note.write(text[:_NOTE_CHARS])
    except Exception:  # noqa: BLE001 - the exit status alone still says it ran out of memory
        pass
    sys.exit(OUT_OF_MEMORY_EXIT)


def _read_memory_note(folder: str, pid: int | None) -> str | None:
    """The first line that worker ``pid`` left before it exited out of memory (and the note removed), or None."""
    if pid is None:
        return None
    path = _memory_note(folder, pid)
    try:
        with open(path, encoding="utf-8") as note:
            text = note.read().strip()
        os.remove(path)
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation failure: MemoryError, ENOMEM, or torch's "Cannot allocate memory" (an mmap of shared memory)."""
    return isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno == errno.ENOMEM) or "Cannot allocate memory" in str(exc)


def out_of_memory_line(worker: str, said: str) -> str:
    """The line of a ``worker`` lost for want of memory, quoting what the error ``said``: one wording for a process
    worker and a Ray actor, as both are lost workers (the run resumes)."""
    return (f"{worker} ran out of memory ({said}); the run can go on after freeing memory or with fewer workers, unless one "
            "client alone needs more than the machine has")


@dataclass(frozen=True)
class _Slot:
    """Where one tensor lives inside a packed tree's flat buffers."""

    buffer: str
    offset: int
    shape: tuple[int, ...]


def map_leaves(tree: Any, fn: Callable[[Any], Any], is_leaf: Callable[[Any], bool]) -> Any:
    """``tree`` with every leaf replaced by ``fn(leaf)``, through dicts, lists, tuples and dataclasses.

    Other objects are kept as they are (pickling still sends their tensors
    through torch's shared-memory reductions, one segment per tensor).
    """
    if is_leaf(tree):
        return fn(tree)
    if isinstance(tree, dict):
        return {k: map_leaves(v, fn, is_leaf) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(map_leaves(v, fn, is_leaf) for v in tree)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        out = copy.copy(tree)  # not replace(): __post_init__ checks would see slots, not tensors
        for f in dataclasses.fields(tree):
            object.__setattr__(out, f.name, map_leaves(vars(tree)[f.name], fn, is_leaf))
        return out
    return tree


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


@dataclass
class PackedTree:
    """A tree whose tensors were replaced by slots into one shared flat buffer per dtype."""

    structure: Any
    buffers: dict[str, torch.Tensor]

    def unpack(self) -> Any:
        """The original tree, every tensor a view into the (shared) flat buffers."""

        def view(leaf: _Slot) -> torch.Tensor:
            n = 1
            for d in leaf.shape:
                n *= d
            return self.buffers[leaf.buffer][leaf.offset : leaf.offset + n].view(leaf.shape)

        return map_leaves(self.structure, view, lambda x: isinstance(x, _Slot))


def pack_tree(tree: Any) -> PackedTree:
    """Copy every tensor of ``tree`` into one flat shared-memory buffer per dtype (CPU tensors)."""
    parts: dict[str, list[torch.Tensor]] = {}
    sizes: dict[str, int] = {}

    def slot(leaf: torch.Tensor) -> _Slot:
        key = str(leaf.dtype).removeprefix("torch.")
        offset = sizes.get(key, 0)
        parts.setdefault(key, []).append(leaf.detach().reshape(-1))
        sizes[key] = offset + leaf.numel()
        return _Slot(key, offset, tuple(leaf.shape))

    structure = map_leaves(tree, slot, _is_tensor)
    buffers = {k: torch.cat(v).share_memory_() for k, v in parts.items()}
    return PackedTree(structure, buffers)


class _Packer:
    """Packs each distinct tree once per round (identity of its tensors), so shared states are sent once."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, ...], PackedTree] = {}

    def __call__(self, tree: Any) -> PackedTree:
        leaves: list[int] = []
        map_leaves(tree, lambda t: leaves.append(id(t)), _is_tensor)
        key = (id(tree) if not leaves else 0, *leaves)
        if key not in self._cache:
            self._cache[key] = pack_tree(tree)
        return self._cache[key]


@dataclass(frozen=True)
class _Setup:
    """What an executor's tasks run with (model template, objective, client side), pickled once into shared memory.

    Every task carries it (a shared-memory handle, not a copy); a worker unpickles it when its ``key``
    is new to it, so one pool of workers can serve several executors, one after another.
    """

    key: int
    blob: torch.Tensor  # uint8, in shared memory

    @classmethod
    def pack(cls, key: int, model: nn.Module, spec: LocalSpec, client: ClientSide | None) -> "_Setup":
        data = pickle.dumps((model, spec, client), protocol=pickle.HIGHEST_PROTOCOL)
        return cls(key, torch.frombuffer(bytearray(data), dtype=torch.uint8).share_memory_())

    def unpack(self) -> tuple[nn.Module, LocalSpec, ClientSide | None]:
        model, spec, client = pickle.loads(self.blob.numpy().tobytes())
        return factored_linears(model), spec, client


@dataclass
class _Task:
    """One training job as sent to a worker: its start state and context packed, ``index`` = position in the round."""

    index: int
    job: ClientJob  # start and context are PackedTrees here
    setup: _Setup

    @property
    def client_id(self) -> int:
        return self.job.client_id

    def unpack(self) -> ClientJob:
        job: Any = self.job
        return dataclasses.replace(job, start=job.start.unpack(), context=job.context.unpack())


@dataclass(frozen=True)
class _Loose:
    """Where a task's fresh tensor (not a view of shared data) sits in the task's own packed buffer."""

    index: int


@dataclass
class _UpdateTask:
    """One client update as sent to a worker, ``index`` = position in the round.

    Model states are packed once per distinct state per round; tensors that are
    views of a larger tensor (a client's rows of the dataset) are moved into
    shared memory in place, once for the whole dataset; every other tensor of
    the task (fresh per round, e.g. a client's evaluation split) goes into one
    flat buffer per task instead of a shared-memory segment per tensor.
    """

    index: int
    client_id: int
    task: Any
    setup: _Setup
    loose: PackedTree | None = None

    @classmethod
    def pack(cls, index: int, task: ClientTask[Any, Any], packer: "_Packer", setup: _Setup) -> "_UpdateTask":
        packed = map_leaves(task, packer, _is_state)
        fresh: list[torch.Tensor] = []

        def place(x: Any) -> Any:
            if isinstance(x, PackedTree):
                return x
            if x._base is not None:  # a view: share its whole storage once
                return x.share_memory_()
            fresh.append(x)
            return _Loose(len(fresh) - 1)

        packed = map_leaves(packed, place, lambda x: isinstance(x, (torch.Tensor, PackedTree)))
        return cls(index, task.client_id, packed, setup, pack_tree(fresh) if fresh else None)

    def unpack(self) -> ClientTask[Any, Any]:
        fresh = self.loose.unpack() if self.loose is not None else []
        return map_leaves(self.task, lambda x: x.unpack() if isinstance(x, PackedTree) else fresh[x.index], lambda x: isinstance(x, (PackedTree, _Loose)))


PARENT_GONE = "parent gone"
"""What :func:`_next_task` returns once the parent process is gone (the parent's own stop sentinel is None)."""


def _next_task(tasks: Any, parent: int, parent_temp: str) -> Any:
    """The next task, None (the parent's stop sentinel), or PARENT_GONE, so no worker outlives its run."""
    while True:
        try:
            return tasks.get(timeout=_POLL_S)
        except queue.Empty:
            if os.getppid() != parent:
                return PARENT_GONE
        except Exception as exc:
            if out_of_memory(exc):  # the task's tensors could not be mapped: one line in the parent, no traceback per worker
                _exit_out_of_memory(exc, parent_temp)
            if isinstance(exc, (EOFError, OSError)):  # the parent's end of the queue closed: it is gone (or going)
                return PARENT_GONE
            raise


def _orphaned(parent: int, wait: float = 2.0) -> bool:
    """Whether the parent is gone; after an EOF on the queue, it may take a moment before this process is reparented."""
    end = time.monotonic() + wait
    while os.getppid() == parent:
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)
    return True


_remove_parent_temp = remove_parent_temp
_watch_parent = watch_parent  # started in the worker before torch's import: chillfl.executors.parent_watch.Watched


def _quiet_once_orphaned(parent: int, wait: float = 1.0) -> None:
    """Install a ``sys.excepthook`` that says nothing of an error once the parent is gone.

    A parent SIGKILLed while it fetched a result's tensors from this worker's resource sharer (multiprocessing's
    server thread that hands file descriptors over a socket, and reports its errors through ``sys.excepthook``) resets
    that connection: the thread's ConnectionResetError printed a traceback under the killed run. A lost parent is no
    error of the worker's; with the parent alive an error is printed as before. ``wait``: the kernel closes a dying
    parent's sockets before it reparents its children."""
    printed = sys.excepthook

    def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if _orphaned(parent, wait):
            return
        printed(kind, value, tb)

    sys.excepthook = hook


def _from_resource_sharer(tb: TracebackType | None) -> bool:
    """Whether a traceback is of multiprocessing's resource-sharer server (``_serve``, which hands file descriptors over)."""
    from multiprocessing import resource_sharer

    return any(f.f_code.co_name == "_serve" and f.f_code.co_filename == resource_sharer.__file__ for f, _ in traceback.walk_tb(tb))


class _QuietSharer:
    """A ``sys.excepthook`` that says nothing of a connection error in this process's resource sharer, for one pool's lifetime.

    A worker killed (kill -9, the OOM killer) while it fetched a task's tensors from the parent resets that connection:
    the sharer's server thread printed a ConnectionResetError traceback before the pool's own one line. The dead worker
    is the pool's error to report (:class:`WorkerError`); every other error is printed as before. :meth:`remove` (the
    pool's shutdown) gives the caller its own hook back: installed for good, it outlived every pool.
    """

    def __init__(self) -> None:
        self.printed = sys.excepthook
        self.active = True
        sys.excepthook = self

    def __call__(self, kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
        if self.active and issubclass(kind, (ConnectionError, EOFError)) and _from_resource_sharer(tb):
            return
        self.printed(kind, value, tb)

    def remove(self) -> None:
        """Take itself out of the hook chain: put the hook it displaced back where it is the installed one, or, under
        another pool's (two pools open at once, closed in opening order), link that one to the hook it displaced, so
        the last pool's close gives the caller its own hook. A hook the caller set since stays, and this one then only
        passes errors on."""
        self.active = False
        if sys.excepthook is self:
            sys.excepthook = self.printed
            return
        hook = sys.excepthook
        while isinstance(hook, _QuietSharer):  # the pools' hooks installed over this one, newest first
            if hook.printed is self:
                hook.printed = self.printed
                return
            hook = hook.printed


def _quiet_resource_sharer() -> _QuietSharer:
    """Install a :class:`_QuietSharer`; the caller removes it when its workers are gone."""
    return _QuietSharer()


_SENT_LAST = 1 << 62
"""The stage of a result its queue could not send (its update had finished): after every client's own failure."""


@dataclass
class _Stage:
    """How far a worker's client update got: the jobs it had yielded (training or prediction), and whether the last
    one was still running (its training raised) or had ended (the update's own code raised after it).

    Why: :func:`~chillfl.engine.protocol.drive` runs a round's updates in lockstep, so a sequential run raises the first
    failing job of the first stage at which any fails; a worker runs one update to its end, so the lowest job's error
    (by index alone) named another client than sequential and vectorized runs for an update of several trainings (a
    client refused at its second training before one refused at its first). :meth:`key` orders the failures as a
    lockstep run meets them."""

    yielded: int = 0
    running: bool = False

    def run(self, work: Callable[[], Any]) -> Any:
        """One yielded job's training or prediction, counted."""
        self.yielded += 1
        self.running = True
        out = work()
        self.running = False
        return out

    def key(self) -> tuple[int, int]:
        """(jobs yielded, 0 if the last one's own work failed, else 1): a lockstep run trains a stage's jobs before it
        runs the updates on to their next ones, and fails at the least key first."""
        return self.yielded, 0 if self.running else 1


def _worker_main(threads: int, tasks: Any, results: Any, parent: int, parent_temp: str, busy: Any = None, slot: int = 0) -> None:
    """Worker loop: run each task, send back (index, packed result) or (index, error text).

    ``busy[slot]``: the client this worker is training (-1 between tasks), which the parent names when a round stalls."""
    # Ctrl-C and a terminal's hang-up (SIGHUP, an ssh disconnect) reach the whole process group, and a scheduler's SIGTERM every
    # process of the job (Slurm's scancel, systemd): the parent decides (it stops after the round, checkpointed, and closes the workers).
    # They were blocked since the spawn (_stop_signals_blocked): ignored first, then unblocked, so one that came meanwhile is dropped
    for sig in _STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    if not _fits(tempfile.gettempdir()):
        short_socket_folder(warn=False)  # its results' tensors pass through a socket of its own (the parent warned)
    _quiet_once_orphaned(parent)
    torch.set_num_threads(threads)  # the parent watch runs already: the pool's target is Watched
    gc.freeze()  # chillfl owns this process: torch's import-time objects out of every later full collection
    key: int | None = None
    while True:
        task: _Task | _UpdateTask | str | None = _next_task(tasks, parent, parent_temp)
        if task is None:
            return
        if isinstance(task, str):  # PARENT_GONE: killed without running its handlers
            if _orphaned(parent):
                _remove_parent_temp(parent_temp)
                # as _watch_parent does: a return runs multiprocessing's finalizers, and this worker's own resource-sharer
                # socket lies in the parent's temp folder (spawned workers inherit its tempdir), which a sibling may have
                # removed: its unlink raised FileNotFoundError, printed as a traceback under the killed run
                os._exit(0)
            return
        if busy is not None:
            busy[slot] = task.client_id
        stage = _Stage()
        try:
            if task.setup.key != key:  # the first task of another executor: its template, objective, client side
                key = None
                model, spec, client = task.setup.unpack()
                pin_worker(model, spec)  # the parent's fp32 math for this run (a fresh process has cuDNN in TF32); this process is chillfl's
                key = task.setup.key
            if isinstance(task, _UpdateTask):
                assert client is not None
                reply = drive_tasks(client, [task.unpack()], lambda _spec, jobs: stage.run(lambda: [train_job(model, spec, j) for j in jobs]),
                                    lambda jobs: stage.run(lambda: predict_each(jobs)))[0]
                results.put((task.index, True, pack_tree(reply)))
                continue
            out = train_job(model, spec, task.unpack())
            carry = None if out.carry is None else (pack_tree(out.carry.state), out.carry.steps)  # a kept optimiser state (ClientJob.carry)
            results.put((task.index, True, (pack_tree(out.params), out.num_steps, out.mean_loss, carry)))
        except ConfigError as exc:  # bad input found in the client (a context key a term reads): the parent raises it as it is
            results.put((task.index, False, (stage.key(), exc)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises
            if out_of_memory(exc):  # the machine's limit, not the client's code: the parent says so in one line
                _exit_out_of_memory(exc, parent_temp)
            text = f"client {task.client_id}: {type(exc).__name__}: {exc}\n--- worker traceback ---\n{traceback.format_exc()}"
            results.put((task.index, False, (stage.key(), text)))
        finally:
            if busy is not None:
                busy[slot] = -1


def _shutdown(processes: list[Any], tasks: Any, results: Any, quiet: _QuietSharer | None = None) -> None:
    """Stop every worker (sentinel, then kill if needed), release the queues, then remove the pool's ``quiet`` hook."""
    try:
        _stop_workers(processes, tasks, results)
    finally:
        if quiet is not None:
            quiet.remove()


def _stop_workers(processes: list[Any], tasks: Any, results: Any) -> None:
    processes = [p for p in processes if p.pid is not None]  # started ones only
    for p in processes:
        if p.is_alive():
            try:
                tasks.put(None)
            except (OSError, ValueError):
                break
    for p in processes:
        p.join(_JOIN_S)
        if p.is_alive():  # still in a job: a worker ignores SIGTERM (see _worker_main), so SIGKILL, which its default was too
            p.kill()
            p.join()
    for q in (tasks, results):
        q.cancel_join_thread()  # the interpreter's exit never waits on a feeder stuck on a full pipe
        q.close()
        _await_feeder(q, _JOIN_S)


def _await_feeder(q: mp_queues.Queue[Any], wait: float) -> None:
    """Wait up to ``wait`` s for the feeder thread of closed ``q`` (if it started) to end.

    The feeder holds two of the queue's named semaphores, and one that ends after the queue object is gone releases
    them itself (unlink, then tell multiprocessing's resource tracker). An interpreter that exits meanwhile stops it
    half-way, and the tracker then printed a leak warning after the run's last line (seen after a second SIGTERM, the
    fastest exit). The workers are gone by now, so the feeder has at most their unread tasks and the stop sentinels
    left to write; a pipe too full for them (workers killed with many tasks unread) is given up on after ``wait``.
    """
    feeder: threading.Thread | None = q._thread  # type: ignore[attr-defined]  # None until the first put
    if feeder is not None:
        feeder.join(wait)


def default_workers() -> int:
    """Cores this process may use (:func:`chillfl.environment.usable_cores`)."""
    return usable_cores()


_STOP_SIGNALS = frozenset(STOP_SIGNALS)  # SIGHUP only where the platform has one


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """While workers start: SIGINT, SIGTERM and SIGHUP blocked in this thread, so that each spawned worker starts with them blocked.

    A worker ignores them (:func:`_worker_main`), but only once its interpreter has imported the parent's main module,
    torch and chillfl, seconds after its start: a job-wide SIGTERM (Slurm's ``scancel``, ``kill -TERM -- -PGID``) in
    those seconds killed it with the default action, and the run ended "worker ... died with exit code -15" (exit 1)
    instead of stopping after its round (143). A signal mask is inherited across spawn's exec, and a signal that
    reaches a worker while blocked waits there until the worker has set it to be ignored. In this process the mask is
    restored at once, and a signal that arrived meanwhile is delivered then.
    """
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _block_stop_signals() -> None:
    """Block :data:`_STOP_SIGNALS` in this thread (inside :func:`_stop_signals_blocked`, which restores the mask after).

    Why again before each start: multiprocessing relaunches a dead resource tracker from ``Process.start`` and then
    unblocks SIGINT and SIGTERM in the calling thread, so every worker started after it would inherit them unblocked."""
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)


def _tracker_keeps_sighup_blocked() -> None:
    """Start multiprocessing's resource tracker (if this process has none yet) with SIGHUP blocked, which it keeps.

    The pool's queues start it on first use, in this process group: a terminal's hang-up (an ssh disconnect) reaches
    it as it reaches the workers, and it ignores only SIGINT and SIGTERM. It died, was relaunched, and printed a
    traceback for every semaphore it no longer knew while the run stopped after its round. A signal mask is
    inherited across the exec that starts it, and it unblocks only SIGINT and SIGTERM; in this process the mask is
    restored at once, and a SIGHUP that arrived meanwhile is delivered then.
    """
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not POSIX
        return
    from multiprocessing import resource_tracker

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class WorkerPool:
    """``workers`` spawned worker processes and their queues, with ``threads_per_worker`` intra-op threads each.

    A :class:`ProcessExecutor` builds its own pool and closes it with itself; a pool built here can
    serve one executor after another (``ProcessExecutor(..., pool=pool)``), one at a time, until
    :meth:`close`.
    """

    def __init__(self, workers: int | None = None, threads_per_worker: int = 1) -> None:
        self.workers = workers if workers is not None else default_workers()
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be >= 1, got {threads_per_worker}")
        self.threads_per_worker = threads_per_worker
        ctx = tmp.get_context("spawn")
        _tracker_keeps_sighup_blocked()  # before the queues, which would start it
        temp = self._temp = short_socket_folder()
        self._tasks = _Tasks(ctx=ctx)
        self._results = _Results(ctx=ctx)
        self._busy = ctx.RawArray("q", [-1] * self.workers)  # each worker's client in training, -1 none: for a stalled round's notice
        self._stall = StallClock()  # when a round that waits for a result names its busy workers
        self._warm = False  # a round has completed: the workers' start-up is behind them
        self._processes = [
            ctx.Process(
                target=Watched(_worker_main, os.getpid(), temp),  # watches its parent from its start, before it imports torch
                args=(threads_per_worker, self._tasks, self._results, os.getpid(), temp, self._busy, i),
                name=f"chillfl-worker-{i}",
                daemon=True,
            )
            for i in range(self.workers)
        ]
        quiet = _quiet_resource_sharer()  # for the pool's lifetime: its shutdown gives the caller's hook back
        self._finalizer = weakref.finalize(self, _shutdown, self._processes, self._tasks, self._results, quiet)
        with _unimportable_main_hidden(), _stop_signals_blocked():
            for p in self._processes:
                _block_stop_signals()  # again: a resource tracker relaunched by the previous start unblocked SIGINT/SIGTERM here
                p.start()
        self._broken: str | None = None
        self._keys = itertools.count(1)

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (for monitoring and tests)."""
        return [p.pid for p in self._processes if p.pid is not None]

    @property
    def usable(self) -> bool:
        """Open, and no worker died (a pool that lost a worker refuses every later round)."""
        return self._broken is None and self._finalizer.alive

    def setup(self, model: nn.Module, spec: LocalSpec, client: ClientSide | None) -> _Setup:
        """An executor's template, objective and client side, under a key no other executor of this pool has.

        A new executor is a new run's (a comparison lends its pool to each): its stall clock starts afresh, so a slow
        earlier run does not delay the notice of a hang in this one's first round."""
        self._stall = StallClock()
        return _Setup.pack(next(self._keys), model, spec, client)

    def round(self, items: Sequence[Any], decode: Callable[[Any], Any]) -> list[Any]:
        """Send ``items`` (at most 2 per worker in flight), collect the decoded results in order."""
        if self._broken:
            raise WorkerError(f"the process pool is unusable: {self._broken}")
        if not self._finalizer.alive:
            raise WorkerError("the process executor is closed")
        self._stall.start_round()
        next_item = 0
        in_flight = 0
        done: dict[int, Any] = {}
        errors: list[tuple[tuple[int, int], int, str | ConfigError]] = []  # (how far its update got, its job, the error)
        while next_item < len(items) or in_flight:
            while next_item < len(items) and in_flight < 2 * self.workers:
                self._tasks.put(items[next_item])
                next_item += 1
                in_flight += 1
            index, ok, payload = self._next_result()
            in_flight -= 1
            if ok:
                done[index] = decode(payload)
            else:  # a worker's (stage, error), or the text of a result its queue could not send: a finished update's, after them
                stage, error = payload if isinstance(payload, tuple) else ((_SENT_LAST, 0), payload)
                errors.append((stage, index, error))
        if self._warm:  # a pool's first round waits for its workers' imports too (seconds, more on a cluster's file system)
            self._stall.end_round()
        self._warm = True
        if errors:
            first = min(errors, key=lambda e: (e[0], e[1]))[2]  # the earliest stage's lowest job: the one a sequential run would have raised
            if isinstance(first, ConfigError):
                raise first
            raise ClientCodeError(first)
        return [done[i] for i in range(len(items))]

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _next_result(self) -> tuple[int, bool, Any]:
        since = time.monotonic()
        while True:
            try:
                got = self._results.get(timeout=_POLL_S)
                self._stall.result(time.monotonic() - since)
                return got
            except queue.Empty:
                self._broken = self._lost()
                if not self._broken:
                    self._notice_stall(time.monotonic() - since)
            except (EOFError, OSError) as exc:  # a result whose tensors' sender died as they were fetched (its socket reset)
                self._broken = self._lost(wait=_JOIN_S) or f"could not receive a result from the workers: {type(exc).__name__}: {exc}"
            if self._broken:
                self.close()
                raise WorkerError(self._broken) from None

    def _notice_stall(self, waited: float) -> None:
        """One warning line naming the workers still busy, and their clients, once ``waited`` s passed without a result.

        A stopped or deadlocked worker is alive, so :meth:`_lost` never sees it: without this line the run said nothing
        for as long as it hung. When: :class:`StallClock`."""
        if not self._stall.due(waited):
            return
        log.warning(stalled_line([f"{p.name} (client {self._busy[i]})" for i, p in enumerate(self._processes) if self._busy[i] >= 0], waited))

    def _lost(self, wait: float = 0.0) -> str | None:
        """Why the pool is broken (a dead worker, a task that could not be sent), or None. ``wait``: up to that long
        for a worker to be seen dead (a reset connection comes from a worker whose exit may not be reaped yet)."""
        end = time.monotonic() + wait
        while True:
            dead = [p for p in self._processes if not p.is_alive()]
            if dead:
                p = dead[0]
                if p.exitcode == OUT_OF_MEMORY_EXIT:
                    notes = [_read_memory_note(self._temp, q.pid) for q in dead if q.exitcode == OUT_OF_MEMORY_EXIT]  # each read, each removed
                    said = notes[0] or "MemoryError"
                    return out_of_memory_line(f"worker {p.name}", said)
                return f"worker {p.name} died with exit code {p.exitcode}"
            if self._tasks.unsent is not None:
                return f"could not send a task to the workers: {self._tasks.unsent}"
            if time.monotonic() >= end:
                return None
            time.sleep(0.05)


class ProcessExecutor:
    """Runs the round's jobs on a :class:`WorkerPool`: its own of ``workers`` processes, or ``pool``; see the module docstring."""

    def __init__(
        self,
        model: nn.Module,
        spec: LocalSpec,
        *,
        workers: int | None = None,
        threads_per_worker: int = 1,
        client: ClientSide | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        if pool is not None and (workers is not None or threads_per_worker != pool.threads_per_worker):
            raise ValueError("an executor on a given pool has the pool's workers and threads_per_worker")
        self._own_pool = pool is None
        self.pool = pool if pool is not None else WorkerPool(workers, threads_per_worker)
        self.workers = self.pool.workers
        self._setup = self.pool.setup(model, spec, client)
        self._closed = False

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (for monitoring and tests)."""
        return self.pool.pids

    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        pack = _Packer()

        def outcome(payload: Any) -> LocalOutcome:
            packed, steps, loss, carry = payload
            return LocalOutcome(packed.unpack(), steps, loss, None if carry is None else Carried(carry[0].unpack(), carry[1]))

        return self._round([self._task(i, job, pack) for i, job in enumerate(jobs)], outcome)

    def map(self, tasks: Sequence[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
        """Every task's client update on the workers (each runs the whole update; bitwise = sequential)."""
        pack = _Packer()
        return self._round([_UpdateTask.pack(i, task, pack, self._setup) for i, task in enumerate(tasks)], lambda payload: payload.unpack())

    def _round(self, items: Sequence[Any], decode: Callable[[Any], Any]) -> list[Any]:
        if self._closed:
            raise WorkerError("the process executor is closed")
        return self.pool.round(items, decode)

    def close(self) -> None:
        """Stop the workers, unless the pool was given: then it stays up for the next executor."""
        self._closed = True
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> "ProcessExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _task(self, index: int, job: ClientJob, pack: _Packer) -> _Task:
        job.x.share_memory_(), job.y.share_memory_()
        packed: Any = dataclasses.replace  # the job travels with PackedTrees in place of its two state dicts
        return _Task(index, packed(job, start=pack(dict(job.start)), context=pack(dict(job.context))), self._setup)


def _is_state(x: Any) -> bool:
    """A model state (or any flat name -> tensor dict): packed whole."""
    return isinstance(x, dict) and bool(x) and all(isinstance(v, torch.Tensor) for v in x.values())

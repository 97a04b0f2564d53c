"""Ray executor: the round's client updates run as calls on Ray actors, on a cluster or on a local Ray.

Like the process pool (:mod:`chillfl.executors.processes`), a worker runs whole
client updates (the protocol's client side, :func:`~chillfl.engine.protocol.drive`
over :func:`~chillfl.executors.sequential.train_job`), so every method runs
unchanged. A worker is a Ray actor created with the ``[ray]`` table's
``num_cpus`` / ``num_gpus``: real Ray resource requests, so Ray places workers
only where those resources are free (a run whose workers cannot be placed
stops after ``start_timeout`` seconds, saying what it asked for).

What travels
------------
* The model template, the training objective and the client side: put in
  Ray's object store once and given to every actor at creation.
* A client's data (:class:`~chillfl.engine.protocol.ClientData`): put in the
  object store once per run; each round's task carries only its reference,
  and an actor fetches the data the first time it serves that client and
  keeps it. Clients stick to the actor that holds their data (as long as the
  round stays balanced), so data reach a worker once, not once per round.
* Each round: one call per actor with its share of the tasks; every distinct
  model state of the round (the global model, shared by all clients) is put
  once and fetched by reference.
* The driver's import path: the actors of a local Ray started here take the
  driver's ``sys.path`` first (:func:`adopt_import_path`), so a user's module
  named in the config (a method, model, partitioner or term) is found where
  the driver found it, as by the process pool's workers. On a cluster the
  nodes have their own files and keep their own path.

Determinism: replies are collected by task index and returned in task order;
an actor runs with the run's ``threads`` intra-op threads, so a run is
bitwise identical to ``sequential`` on the CPU at equal thread counts.

Failures: actors are created with ``max_restarts = max_task_retries =
[ray].max_retries``. A worker process that dies is restarted by Ray and its
call retried (client updates are pure, so a retry gives the same replies;
the restarted actor re-fetches its clients' data). When the retries are
spent, the round raises :class:`~chillfl.executors.processes.WorkerError` with
one line and nothing of that round is aggregated. An actor that runs out of
memory (a MemoryError in it, or Ray's ``OutOfMemoryError``) is lost in the same
way, and the executor unusable after it, as the process pool after a worker's
MemoryError. A client's own exception is a
:class:`~chillfl.executors.processes.ClientCodeError` naming that client: an
actor runs its share one client at a time (:class:`ClientFailed`), as a process
worker and a Flower node do.

Stop signals: the driver waits on the actors in steps of :data:`WAIT_STEP_S` inside a
:class:`~chillfl.stop_signals.RaisedLater`, since Ray's wait runs the signal handlers from its C code: the
runner's "stop at once" for a second signal is raised between the steps, as under the ``processes`` executor.

Lifetime: the actors and the Ray connection are a :class:`RayWorkers`. An
executor builds its own and closes it with itself; a :class:`RayWorkers` built
apart serves one executor after another (``RayExecutor(..., pool=workers)``),
so a sweep or a test of many runs starts its actors (seconds each: they import
torch) once. An actor meeting a new executor's parts drops the previous one's
executor and client data. A local Ray started here is shut down by
:meth:`RayWorkers.close` (the runner closes the executor at the end, after an
error and after SIGINT/SIGTERM), by a finaliser, and at interpreter exit. If
this process is killed, its raylet and GCS go at once, the workers within
seconds, and Ray's dashboard and runtime-env agents (started even without the
dashboard) within about a minute, once they see the raylet gone; they keep the
blocked SIGTERM (:func:`stop_signals_blocked`), so SIGKILL to the process group
stops them at once. On a cluster the workers only kill their own actors and disconnect.
"""

from __future__ import annotations

import dataclasses
import contextlib
import hashlib
import logging
import math
import os
import random
import shutil
import signal
import subprocess
from collections import Counter
import sys
import tempfile
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
from torch import nn

from chillfl.config import RayConfig
from chillfl.executors.sequential import SequentialExecutor
from chillfl.executors.processes import (AF_UNIX_PATH_MAX, ClientCodeError, StallClock, WorkerError, _is_state, default_workers, map_leaves,
                                         out_of_memory, out_of_memory_line, stalled_line)
from chillfl.engine.protocol import ClientData, ClientJob, ClientReply, ClientSide, ClientTask
from chillfl.errors import ConfigError, failure_line
from chillfl.paths import check_writable_dir
from chillfl.stop_signals import STOP_SIGNALS, RaisedLater
from chillfl.training.local import LocalOutcome, LocalSpec, pin_worker

log = logging.getLogger(__name__)

EXTRA = "pip install 'chillfl[ray]'"


WAIT_STEP_S = 0.1
"""How long the driver waits on the actors in one ``ray.wait`` before it raises what a stop signal's handler raised
meanwhile (:class:`~chillfl.stop_signals.RaisedLater`): a second Ctrl-C stops a round within this."""

RAN_IN = "a Ray actor"
"""Where a client's code ran under this executor (:attr:`ClientCodeError.ran_in <chillfl.executors.processes.ClientCodeError>`)."""

LOCAL_RAY_PREFIX = "ray"
"""A local Ray's folder in the temp directory (:func:`tempfile.mkdtemp` adds 8 characters; short, for the socket paths under it): removed when it stops."""
RAY_SOCKET_SUFFIX = len(f"/{LOCAL_RAY_PREFIX}12345678/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store")
"""What a local Ray started here appends to the temp directory for its longest socket path."""


def import_ray(address: str | None = None) -> Any:
    """The ``ray`` module, or a ConfigError naming the extra that installs it.

    ``address``: the config's ``ray.address`` when a run is about to start (then a
    local Ray, started when neither it nor ``RAY_ADDRESS`` names a cluster, must
    fit its socket paths under its temp folder: with a long ``TMPDIR`` it fails
    with an ``AF_UNIX path length`` traceback, so that is one line here instead).
    """
    # Ray's failure signal handler (stack traces on a crash) takes SIGTERM at ray.init and, at ray.shutdown, sets
    # it back to SIG_DFL from a thread of Ray's: a SIGTERM then killed chillfl with nothing said (exit -15,
    # tests/private_net/test_ray.py). Ray reads this when it is imported; an explicit "0" keeps Ray's handler.
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    imported = "ray" in sys.modules
    hook, path, client_mode = sys.excepthook, list(sys.path), os.environ.get("RAY_CLIENT_MODE")
    try:
        import ray
    except ImportError:
        raise ConfigError("executor", f"'ray' needs the Ray package, which is not installed here: {EXTRA}") from None
    if not imported:
        undo_import(hook, path, client_mode)
    if address is not None and not (address or os.environ.get("RAY_ADDRESS")):
        check_local_ray_temp()
    return ray


def check_local_ray_temp() -> None:
    """Refuse, in one line naming the variable, a temp folder a local Ray started here cannot use: before the run's
    folder is written, not as a traceback from inside the run (:func:`local_ray_folder`), which left a ``NAME.partial``.

    Its socket paths must fit under it (with a long ``TMPDIR`` Ray failed with an ``AF_UNIX path length`` traceback);
    ``RAY_TMPDIR``, when set, must be a folder this user can create folders in: :func:`tempfile.mkdtemp` takes it as
    it is (a missing or read-only one raised FileNotFoundError or PermissionError), while a bad ``TMPDIR`` is skipped
    for /tmp by :func:`tempfile.gettempdir`. Needs no Ray: it reads only the environment and the file system."""
    variable = "RAY_TMPDIR" if "RAY_TMPDIR" in os.environ else "TMPDIR" if "TMPDIR" in os.environ else None
    temp = os.environ[variable] if variable else "/tmp"
    if variable and len(os.fsencode(temp)) + RAY_SOCKET_SUFFIX > AF_UNIX_PATH_MAX:
        raise ConfigError(
            variable,
            f"is {len(os.fsencode(temp))} bytes long; a local Ray's socket paths under it would pass the {AF_UNIX_PATH_MAX}-byte limit of "
            f"AF_UNIX paths: set RAY_TMPDIR to a folder of at most {AF_UNIX_PATH_MAX - RAY_SOCKET_SUFFIX} bytes (e.g. /tmp)",
        )
    ray_temp = os.environ.get("RAY_TMPDIR")
    if ray_temp:  # "" reads as unset (local_ray_folder)
        if not os.path.isdir(ray_temp):
            where = "is not a folder" if os.path.lexists(ray_temp) else "does not exist"
            raise ConfigError("RAY_TMPDIR", f"{ray_temp} {where}: a local Ray's session folder is made in it; create it, or unset RAY_TMPDIR")
        check_writable_dir(ray_temp, "RAY_TMPDIR")


def undo_import(hook: Any, path: Sequence[str], client_mode: str | None) -> None:
    """Give the caller back what ``import ray`` changed in this process: ``sys.excepthook`` (Ray's reports a driver's
    uncaught exception to its GCS, then calls the one it displaced), ``sys.path`` (Ray puts its ``thirdparty_files``
    first; psutil and colorama, imported from there, are imported by now) and ``RAY_CLIENT_MODE`` (read at the import,
    and written ``"0"`` where absent, which reads the same). ``hook``, ``path``, ``client_mode``: as before the import."""
    worker = sys.modules.get("ray._private.worker")
    if sys.excepthook is getattr(worker, "custom_excepthook", None):
        sys.excepthook = hook
    # counted, not "not in path": where thirdparty_files is on sys.path already (from PYTHONPATH), Ray's insert is a
    # duplicate of it, which must go too
    for entry, count in (Counter(sys.path) - Counter(path)).items():
        for _ in range(count):
            sys.path.remove(entry)  # the first occurrence: Ray inserts at 0
    if client_mode is None:
        os.environ.pop("RAY_CLIENT_MODE", None)


@dataclass
class DriverState:
    """What connecting to Ray changes in this (driver) process beyond the import (:func:`undo_import`), given back when
    the connection closes: ``ray.init`` sets ``PYTHONBREAKPOINT`` (a ``breakpoint()`` after the run would reach Ray's
    debugger hook); chillfl sets ``RAY_USAGE_STATS_ENABLED=0``. (``ray.init`` and ``ray.shutdown`` also draw from
    Python's ``random``: :func:`random_kept` around each, not a state taken here and set back at the close, which
    rewound the draws the caller's callbacks made during the run.) The child processes a local Ray started (GCS, raylet, its agents), killed by
    ``ray.shutdown``, are reaped (:meth:`reap`): they stayed zombies until some later ``subprocess`` call."""

    environ: dict[str, str | None]

    VARIABLES = ("PYTHONBREAKPOINT", "RAY_USAGE_STATS_ENABLED")

    @classmethod
    def take(cls) -> "DriverState":
        return cls({name: os.environ.get(name) for name in cls.VARIABLES})

    def restore(self) -> None:
        for name, value in self.environ.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def random_kept() -> Iterator[None]:
    """Python's ``random`` as the block found it: ``ray.init`` and ``ray.shutdown`` draw from it (a local Ray's
    spill-folder pick, its log subscriber), and a seeded caller's stream must not move for them."""
    state = random.getstate()
    try:
        yield
    finally:
        random.setstate(state)


def ray_children(ray: Any) -> list[subprocess.Popen[Any]]:
    """The processes the local Ray of this driver started as its children (Ray's own record of them; empty where there is none)."""
    node = getattr(getattr(ray, "_private", None), "worker", None)
    node = getattr(node, "_global_node", None)
    processes = getattr(node, "all_processes", None)
    if not isinstance(processes, dict):
        return []
    found = [getattr(info, "process", None) for infos in processes.values() for info in infos]
    return [p for p in found if isinstance(p, subprocess.Popen)]


def reap(children: Sequence[subprocess.Popen[Any]], wait: float = 2.0) -> None:
    """Collect the exit status of ``children`` (``ray.shutdown`` killed them), ``wait`` seconds at most in all: one
    still running after that is left to ``subprocess``'s own clean-up."""
    deadline = time.monotonic() + wait
    for child in children:
        try:
            child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            continue


def workers_fit(have: Mapping[str, float], num_cpus: float, num_gpus: float) -> list[int]:
    """How many workers of ``num_cpus`` and ``num_gpus`` each ``have`` (Ray's resources) fits, one count per resource asked
    for: the Ray executor's worker count, and the Flower simulation's check of ``num_cpus_per_client`` (one rule)."""
    return [math.floor(have.get(kind, 0) / need + 1e-9) for kind, need in (("CPU", num_cpus), ("GPU", num_gpus)) if need > 0]


def local_ray_folder() -> str:
    """A new folder for a local Ray's sessions (its ``_temp_dir``), under ``RAY_TMPDIR``, else ``TMPDIR``, else /tmp.

    Ray's default, /tmp/ray, keeps every session's folder (logs, sockets) for good; whoever starts a
    local Ray in this folder removes it when that Ray has stopped.
    """
    try:
        return tempfile.mkdtemp(prefix=LOCAL_RAY_PREFIX, dir=os.environ.get("RAY_TMPDIR") or None)
    except OSError as exc:  # checked before the run (check_local_ray_temp); removed or made read-only since
        raise ConfigError("RAY_TMPDIR" if os.environ.get("RAY_TMPDIR") else "TMPDIR", f"cannot make a local Ray's folder: {exc.strerror or exc}") from None


def _compact(x: torch.Tensor) -> torch.Tensor:
    """``x`` alone: pickling a view would send its whole storage (the whole dataset for a client's rows)."""
    if x._base is not None or x.untyped_storage().nbytes() != x.numel() * x.element_size():
        return x.clone()
    return x


def _fingerprint(data: ClientData) -> bytes:
    """A digest of a client's tensors (shapes, dtypes, bytes)."""
    h = hashlib.blake2b(digest_size=16)
    for t in (data.x, data.y, data.x_eval, data.y_eval):
        if t is None:
            h.update(b"-")
            continue
        h.update(f"{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.digest()


def _nbytes(tree: Any) -> int:
    sizes: list[int] = []
    map_leaves(tree, lambda t: sizes.append(t.numel() * t.element_size()), lambda x: isinstance(x, torch.Tensor))
    return sum(sizes)


@dataclass(frozen=True)
class _Ref:
    """An object-store reference standing in for a model state (``data=False``) or a client's data (``data=True``)."""

    ref: Any
    data: bool = False


def driver_import_path() -> list[str]:
    """This process's ``sys.path``, the working directory spelt out for ``""``: what the actors of a local Ray import from."""
    return [entry or os.getcwd() for entry in sys.path]


def adopt_import_path(driver: Sequence[str]) -> None:
    """Make this process's ``sys.path`` the driver's ``driver`` entries, in the driver's order, then its own other entries.

    Why: a worker unpickles the run's model, objective terms and client half, and builds the user's classes a
    config names by import path, so it must import what the driver imports. Ray gives its workers the driver's
    working directory and script folder only; a folder the driver's Python put on ``sys.path`` (a script's
    ``sys.path.insert``, a notebook, pytest) was missing there, and a plugin found by ``sequential``, by the
    ``processes`` executor (``spawn`` hands its children the parent's ``sys.path``) and by Flower's simulation
    (its Ray actors get the driver's ``sys.path``) stopped a Ray run in round 1 with ``ModuleNotFoundError``.
    """
    own = [entry for entry in sys.path if entry not in driver]
    sys.path[:] = [*driver, *own]


def ignore_stop_signals() -> None:
    """Ignore SIGINT/SIGTERM/SIGHUP in this (actor) process: the driver alone handles them, stops after the round and shuts Ray down.

    Why: a local Ray's processes share the driver's process group, so a signal sent to every process of the job
    (Ctrl-C in a terminal, ``kill -TERM -PGID``, a cluster scheduler's scancel) reached the actors too. Ray's workers take
    SIGTERM (``sys.exit`` in the middle of a client update), Ray restarted them until their retries were spent, and the run
    ended with "worker failed: ... died and was restarted" and exit 1 instead of the driver's "interrupted by SIGTERM
    after round N" and exit 143 (tests/private_net/test_ray.py). The ``processes`` executor's workers ignore them in the
    same way.

    The actors still go with the local Ray: the raylet's SIGTERM at ``ray.shutdown`` is ignored now too, so a daemon
    thread ends this process as soon as its parent (the raylet) is gone; without it they outlived the run by seconds.
    """
    if threading.current_thread() is not threading.main_thread():  # an actor's __init__ runs on its main thread; never fail over it
        return
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    parent = os.getppid()

    def follow_parent() -> None:
        while os.getppid() == parent:
            time.sleep(0.1)
        os._exit(1)

    threading.Thread(target=follow_parent, name="chillfl-follow-raylet", daemon=True).start()


class ClientFailed(Exception):
    """A client's own exception in an actor, said in one line (``said``) with the client whose update raised it.

    Why: Ray gives the driver what an actor's call raised, and a call runs a share of several clients, so the driver's
    line could not say whose code failed, where a process worker's and a Flower node's name the client. The line is
    made here, where the exception is (its class's name, not Ray's ``RayTaskError(...)``, as a Flower node says it)."""

    def __init__(self, client_id: int, said: str, refused: ConfigError | None = None) -> None:
        super().__init__(client_id, said, refused)  # the args: what pickling rebuilds it from
        self.client_id = client_id
        self.said = said
        self.refused = refused
        """Bad input only this client's update met (a context key): raised as itself by the driver (exit 2), carried here so
        that the driver knows whose job it was, and raises the first failing job's error as a serial run does."""

    def __str__(self) -> str:
        return f"client {self.client_id}: {self.said}"


@contextlib.contextmanager
def client_named(client_id: int) -> Iterator[None]:
    """Raise a client's own exception in the block as :class:`ClientFailed` naming ``client_id`` (bad input, a ConfigError,
    in its ``refused``: the driver raises it as itself); an allocation failure (the machine's limit, a lost worker's)
    passes as it is."""
    try:
        yield
    except ConfigError as error:
        raise ClientFailed(client_id, str(error), refused=error) from error
    except Exception as error:
        if out_of_memory(error):
            raise
        raise ClientFailed(client_id, failure_line(error)) from error  # the traceback stays in Ray's task error


class Worker:
    """The actor: runs client updates with a private sequential executor; keeps the data of the clients it served.

    ``import_path``: the driver's ``sys.path`` (:func:`adopt_import_path`), given to the actors of a local Ray the
    run started; empty on a cluster, whose nodes have their own files (a user's module is installed there).
    ``local``: the actor is a process of a local Ray the driver started, so it ignores stop signals
    (:func:`ignore_stop_signals`) and leaves them to the driver; on a cluster a node's own tools stop its workers.
    """

    def __init__(self, threads: int, import_path: Sequence[str] = (), local: bool = False) -> None:
        if local:
            ignore_stop_signals()
        if import_path:
            adopt_import_path(import_path)
        if threads > 0:
            torch.set_num_threads(threads)
        self.executor: SequentialExecutor | None = None
        self.parts: bytes | None = None  # the object id of the parts self.executor was built from
        self.data: dict[int, ClientData] = {}
        self.received_data_bytes = 0

    def _ready(self, parts: Any) -> SequentialExecutor:
        """The executor of the calling run, built from the parts' reference the first time this actor meets them.

        The parts come with every call, by reference, rather than as constructor
        arguments: a restarted actor then never depends on its creation arguments,
        and an actor serves one run after another. Another run's parts replace the
        executor and drop the client data cached for the previous run.
        """
        key = parts[0].binary()
        if self.executor is None or self.parts != key:
            import ray

            model, spec, client = ray.get(parts[0])
            pin_worker(model, spec)  # the driver's fp32 math and, on CUDA, its deterministic algorithms for this run (set per run)
            self.executor = SequentialExecutor(model, spec, client=client)
            self.parts, self.data, self.received_data_bytes = key, {}, 0
        return self.executor

    def pid(self) -> int:
        return os.getpid()

    def stats(self) -> dict[str, Any]:
        """Bytes of client data this actor fetched so far, how many clients' data it holds, where it runs."""
        import ray

        node = ray.get_runtime_context().get_node_id()
        return {"received_data_bytes": self.received_data_bytes, "clients": len(self.data), "pid": os.getpid(), "node": node}

    def update(self, parts: Any, tasks: list[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
        import ray

        executor = self._ready(parts)
        states: dict[Any, Any] = {}

        def resolve(leaf: _Ref) -> Any:
            if not leaf.data:
                if leaf.ref not in states:
                    states[leaf.ref] = ray.get(leaf.ref)
                return states[leaf.ref]
            return leaf  # data: resolved per client below, from the cache when this actor has them

        local = []
        for task in tasks:
            task = map_leaves(task, resolve, lambda x: isinstance(x, _Ref))
            if task.client_id not in self.data:
                self.data[task.client_id] = ray.get(task.data.ref)
                self.received_data_bytes += _nbytes(self.data[task.client_id])
            local.append(dataclasses.replace(task, data=self.data[task.client_id]))
        replies: list[ClientReply[Any, Any]] = []
        for one in local:  # one client at a time, as a process worker runs them (bitwise the same): a failure names its client
            with client_named(one.client_id):
                replies.extend(executor.map([one]))
        return replies

    def run(self, parts: Any, jobs: list[ClientJob]) -> list[LocalOutcome]:
        executor = self._ready(parts)
        outcomes: list[LocalOutcome] = []
        for job in jobs:  # as update
            with client_named(job.client_id):
                outcomes.extend(executor.run([job]))
        return outcomes


@contextlib.contextmanager
def without_ray_tip() -> Iterator[None]:
    """Ray's tip about a future default for ``num_gpus = 0`` actors silenced: two lines on every run, and nothing to do
    about them (Flower's simulation, :func:`chillfl.flower.run_simulation`, starts Ray in the same way)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Tip: In future versions of Ray", category=FutureWarning)
        yield


@contextlib.contextmanager
def stop_signals_blocked(started_local: bool) -> Iterator[None]:
    """SIGTERM and SIGHUP blocked in this thread while it starts a local Ray (``started_local``), then restored.

    Every process ``ray.init`` starts (GCS, raylet, its agents, and the workers the raylet starts) inherits the
    blocked mask, as Ray itself does for SIGINT: a SIGTERM to the job's whole process group (``kill -TERM -PGID``,
    a scheduler's scancel) then reaches the driver alone, which stops after the round and shuts Ray down (with
    SIGKILL). Without it the raylet drained and its dashboard agent died on that SIGTERM, the raylet exited with
    the agent, and the round in flight could be lost: "worker failed: ... died and was restarted", exit 1, instead
    of exit 143 (tests/private_net/test_ray.py). A signal sent meanwhile waits and is handled once unblocked.
    """
    if not started_local:
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class RayWorkers:
    """The Ray connection and ``workers`` actors, with the ``[ray]`` table's resources each; see the module docstring.

    ``options``: the ``[ray]`` table (address, resources, how many, retries, start timeout); ``threads``:
    the actors' intra-op threads; ``clients_per_round`` caps the actor count when ``workers = 0``.
    """

    def __init__(self, options: RayConfig, *, threads: int = 1, clients_per_round: int = 1) -> None:
        ray = import_ray()
        self.ray = ray
        self.options = options
        self.threads = threads
        self.started_local = False
        self.connected_here = not ray.is_initialized()  # then close() disconnects too
        temp: str | None = None
        driver = DriverState.take() if self.connected_here else None  # given back when it disconnects
        if self.connected_here:
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never phone home
            address = options.address or os.environ.get("RAY_ADDRESS", "") or "local"
            kwargs: dict[str, Any] = {}
            if address == "local":  # never attach to a cluster someone else left on this machine
                # its sessions (logs, sockets) in a folder of its own, removed when it stops: Ray's default, /tmp/ray,
                # keeps every session's folder for good
                temp = local_ray_folder()
                kwargs = {"num_cpus": default_workers(), "include_dashboard": False, "_temp_dir": temp}
                self.started_local = True
            try:
                with without_ray_tip(), stop_signals_blocked(started_local=address == "local"), random_kept():
                    ray.init(address=address, logging_level=logging.WARNING, configure_logging=False, **kwargs)
            except BaseException as exc:  # whatever ended it (a timeout, an interrupt): the driver's state given back
                if temp:
                    shutil.rmtree(temp, ignore_errors=True)
                if driver is not None:
                    driver.restore()
                if not isinstance(exc, (ConnectionError, RuntimeError, ValueError)):
                    raise
                where = "a local Ray" if address == "local" else f"the Ray cluster at {address!r}"
                raise WorkerError(f"could not start or reach {where}: {failure_line(exc)}") from None  # the line naming what failed
        self.lost: str | None = None
        """Why an actor is gone for good (set by an executor that found it dead after its retries, or out of memory)."""
        # from here on, whatever goes wrong (a second SIGTERM included) shuts down what was started
        self.actors: list[Any] = []
        self._finalizer = weakref.finalize(self, _shutdown, ray, self.actors, self.connected_here, temp, driver)
        try:
            self._start_actors(clients_per_round)
        except BaseException:
            self.close()
            raise

    def _start_actors(self, clients_per_round: int) -> None:
        ray, options = self.ray, self.options
        self.workers = self._count(clients_per_round)
        actor = ray.remote(Worker).options(
            num_cpus=options.num_cpus, num_gpus=options.num_gpus, max_restarts=options.max_retries, max_task_retries=options.max_retries,
        )
        import_path = driver_import_path() if self.started_local else []  # the same files: a local Ray's workers import what the driver does
        # a local Ray's actors are in the driver's process group: they leave SIGINT/SIGTERM/SIGHUP to it (ignore_stop_signals)
        self.actors.extend(actor.remote(self.threads, import_path, self.started_local) for _ in range(self.workers))
        try:
            ray.get([a.pid.remote() for a in self.actors], timeout=options.start_timeout)
        except ray.exceptions.GetTimeoutError:
            have = ray.cluster_resources() if ray.is_initialized() else {}
            raise WorkerError(
                f"Ray could not place {self.workers} worker(s) of num_cpus={options.num_cpus:g}, num_gpus={options.num_gpus:g} "
                f"within {options.start_timeout:g} s (cluster: {have.get('CPU', 0):g} CPUs, {have.get('GPU', 0):g} GPUs)"
            ) from None

    def _count(self, clients: int) -> int:
        """``[ray].workers``, or as many as the cluster's resources fit (at most the clients per round)."""
        options = self.options
        if options.workers:
            return options.workers
        return max(1, min(clients, *workers_fit(self.ray.cluster_resources(), options.num_cpus, options.num_gpus)))

    @property
    def pids(self) -> list[int]:
        """The actors' process ids (for monitoring and tests)."""
        return list(self.ray.get([a.pid.remote() for a in self.actors]))

    def stats(self) -> list[dict[str, Any]]:
        """Per actor: bytes of the current run's client data fetched so far, clients held, process id, node."""
        return list(self.ray.get([a.stats.remote() for a in self.actors]))

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    @property
    def usable(self) -> bool:
        """Open, and no actor was lost for good (its restarts spent): such workers would fail every later run too."""
        return not self.closed and self.lost is None

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "RayWorkers":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class RayExecutor:
    """Runs the round's client updates on Ray actors: its own :class:`RayWorkers`, or ``pool``; see the module docstring."""

    def __init__(
        self, model: nn.Module, spec: LocalSpec, client: ClientSide, options: RayConfig, *, threads: int = 1, clients_per_round: int = 1,
        pool: RayWorkers | None = None,
    ) -> None:
        if pool is not None and (pool.closed or pool.threads != threads):
            raise ValueError("an executor on given Ray workers runs on open workers, with their threads")
        self._own_pool = pool is None
        self.pool = pool if pool is not None else RayWorkers(options, threads=threads, clients_per_round=clients_per_round)
        self._ray = self.pool.ray
        self.options = self.pool.options  # the actors' resources and retries are the pool's
        self.workers = self.pool.workers
        self.connected_here = self.pool.connected_here
        self._actors = self.pool.actors
        self._data: dict[int, tuple[bytes, Any]] = {}  # client -> (fingerprint of its data, object ref)
        self._home: dict[int, int] = {}  # client -> actor holding its data
        self.sent_data_bytes = 0
        self._broken: str | None = None
        self._closed = False
        self._stall = StallClock()  # when a round that waits for its actors names the busy ones
        try:
            self._parts = [self._ray.put((model, spec, client))]  # in a list: passed by reference, fetched once per actor
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        """The actors' process ids (for monitoring and tests)."""
        return self.pool.pids

    def stats(self) -> list[dict[str, Any]]:
        """Per actor: bytes of client data fetched so far, clients held, process id."""
        return self.pool.stats()

    def _assign(self, client_ids: Sequence[int]) -> list[int]:
        """Actor index per task: the client's own actor while it has room this round, else the least loaded one."""
        cap = math.ceil(len(client_ids) / self.workers)
        load = [0] * self.workers
        out = []
        for cid in client_ids:
            home = self._home.get(cid)
            if home is None or load[home] >= cap:
                home = min(range(self.workers), key=lambda a: (load[a], a))
                self._home[cid] = home
            load[home] += 1
            out.append(home)
        return out

    def _data_ref(self, client_id: int, data: ClientData) -> _Ref:
        """The object-store copy of a client's data, put once (again only if the client's data changed).

        Each round's task carries fresh tensors (rows gathered from the dataset),
        so the data are recognised by content, not by identity.
        """
        key = _fingerprint(data)
        known = self._data.get(client_id)
        if known is None or known[0] != key:
            compact = map_leaves(data, _compact, lambda x: isinstance(x, torch.Tensor))
            self.sent_data_bytes += _nbytes(compact)
            known = (key, self._ray.put(compact))
            self._data[client_id] = known
        return _Ref(known[1], data=True)

    def _ship(self, task: ClientTask[Any, Any], states: dict[int, _Ref]) -> ClientTask[Any, Any]:
        """``task`` with its data and its model states replaced by references (each distinct state put once a round)."""

        def state_ref(state: Any) -> _Ref:
            if id(state) not in states:
                states[id(state)] = _Ref(self._ray.put({k: _compact(v) for k, v in state.items()}))
            return states[id(state)]

        light = dataclasses.replace(task, data=None)  # type: ignore[arg-type]  # the data travel apart, by reference
        light = map_leaves(light, state_ref, _is_state)
        light = map_leaves(light, _compact, lambda x: isinstance(x, torch.Tensor))
        return dataclasses.replace(light, data=self._data_ref(task.client_id, task.data))

    def map(self, tasks: Sequence[ClientTask[Any, Any]]) -> list[ClientReply[Any, Any]]:
        """Every task's client update on the actors, replies in task order; any lost worker stops the round."""
        owners = self._assign([t.client_id for t in tasks])
        states: dict[int, _Ref] = {}
        shares: list[list[int]] = [[] for _ in range(self.workers)]
        for i, a in enumerate(owners):
            shares[a].append(i)
        with RaisedLater() as later:  # Ray's C code runs the handlers: what they raise is raised between its calls
            calls = {a: self._actors[a].update.remote(self._parts, [self._ship(tasks[i], states) for i in idx]) for a, idx in enumerate(shares) if idx}
            collected = self._collect(calls, tasks, shares, later)
        replies: list[Any] = [None] * len(tasks)
        for a, out in collected.items():
            for i, reply in zip(shares[a], out):
                replies[i] = reply
        return replies

    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        """Training jobs on the actors (each job's tensors sent with it), outcomes in job order."""
        owners = self._assign([j.client_id for j in jobs])
        shares: list[list[int]] = [[] for _ in range(self.workers)]
        for i, a in enumerate(owners):
            shares[a].append(i)
        compact = [map_leaves(j, _compact, lambda x: isinstance(x, torch.Tensor)) for j in jobs]
        with RaisedLater() as later:  # as in map
            calls = {a: self._actors[a].run.remote(self._parts, [compact[i] for i in idx]) for a, idx in enumerate(shares) if idx}
            collected = self._collect(calls, jobs, shares, later)
        outcomes: list[Any] = [None] * len(jobs)
        for a, out in collected.items():
            for i, outcome in zip(shares[a], out):
                outcomes[i] = outcome
        return outcomes

    def _collect(self, calls: dict[int, Any], items: Sequence[Any], shares: list[list[int]], later: RaisedLater) -> dict[int, Any]:
        """Every call's result, or one WorkerError once every call has settled (a lost worker's round is never used).

        Waits in steps of :data:`WAIT_STEP_S`, raising between them what a stop signal's handler raised (``later``): a
        second signal stops the round from Python code, not from inside Ray's wait, where Ray turned it into SystemErrors.
        """
        if self._broken:
            raise WorkerError(f"the Ray executor is unusable: {self._broken}")
        if self._closed or self.pool.closed:
            raise WorkerError("the Ray executor is closed")
        ray = self._ray
        actor_of = {ref: a for a, ref in calls.items()}
        pending = list(calls.values())
        since = time.monotonic()
        self._stall.start_round()
        while pending:  # returns as soon as every call has settled (failed ones too), not at the next step
            ready, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_STEP_S)
            later.check()
            if ready:
                self._stall.result(time.monotonic() - since)
                since = time.monotonic()
            elif self._stall.due(waited := time.monotonic() - since):  # a stopped or stuck actor is alive: say which
                log.warning(stalled_line([f"{a} (clients {', '.join(str(items[i].client_id) for i in shares[a])})"
                                          for a in sorted(actor_of[ref] for ref in pending)], waited, kind="Ray worker"))
        self._stall.end_round()
        results: dict[int, Any] = {}
        # a client's own exception, or bad input: the run's, the first failing job's (as a serial run and the process pool
        # raise it), keyed by its job's index in ``items``: a share is dealt round-robin, so actor 0 may hold a later job
        errors: list[tuple[int, str | ConfigError]] = []
        died: list[tuple[int, str]] = []  # an actor dead for good: a lost worker's, and the executor unusable
        lost: list[tuple[int, str]] = []  # an actor out of memory: a lost worker's, as a process worker's
        for a, ref in calls.items():
            clients = ", ".join(str(items[i].client_id) for i in shares[a])
            first_job = min(shares[a], default=a)  # the share's first job: where an error names no client
            try:
                results[a] = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                # why it died (a creation task's exception, "The actor is dead because ..."), not Ray's preamble ("The actor
                # died unexpectedly before finishing this task."), by the rule a client's exception and a Flower node's error are said by
                died.append((a, f"Ray worker {a} (clients {clients}) died and was restarted {self.options.max_retries} time(s) without finishing its share; "
                                f"the round was not aggregated ({failure_line(exc, 220)})"))
            except ray.exceptions.OutOfMemoryError as exc:  # Ray's memory monitor killed the call's worker: the node's limit
                lost.append((a, out_of_memory_line(f"Ray worker {a} (clients {clients})", failure_line(exc))))
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, ConfigError):  # bad input only a client sees (a context key): one line and exit 2, as in a serial run
                    errors.append((first_job, exc.cause))
                    continue
                if isinstance(exc.cause, ClientFailed):  # a client's own exception, with its client (as a Flower node's is said)
                    job = next((i for i in shares[a] if items[i].client_id == exc.cause.client_id), first_job)
                    errors.append((job, exc.cause.refused if exc.cause.refused is not None else
                                   f"Ray worker {a} (client {exc.cause.client_id}): a client update failed: {exc.cause.said}"))
                    continue
                cause = exc.as_instanceof_cause() if hasattr(exc, "as_instanceof_cause") else exc
                # the exception itself where Ray has it (its message's first line, notes left out), else Ray's text (a traceback)
                said = failure_line(exc.cause if isinstance(exc.cause, BaseException) else str(exc), kind=type(cause).__name__)
                if isinstance(exc.cause, BaseException) and out_of_memory(exc.cause):  # the machine's limit, not the client's code
                    lost.append((a, out_of_memory_line(f"Ray worker {a} (clients {clients})", said)))
                    continue
                # raised outside a client's own update (the run's parts, a client's data): the share's clients
                errors.append((first_job, f"Ray worker {a} (clients {clients}): a client update failed: {said}"))
        if died or lost:  # a lost worker makes the round a lost worker's, whatever another's client code raised: resumable
            # unusable after either, as the process pool after a worker's MemoryError: a dead actor is gone for good, and one
            # that ran out of memory may be left half-done (an allocation failed inside torch) or about to be killed by Ray
            self._broken = min(died + lost, key=lambda e: e[0])[1]
            self.pool.lost = self.pool.lost or self._broken
            raise WorkerError(self._broken)
        if errors:
            first = min(errors, key=lambda e: e[0])[1]
            if isinstance(first, ConfigError):
                raise first
            raise ClientCodeError(first, ran_in=RAN_IN)  # a client's own exception: the run's failure
        return results

    def close(self) -> None:
        """Stop the actors (and a Ray started for them), unless the workers were given: they stay up for the next executor."""
        self._closed = True
        if self._own_pool:
            self.pool.close()

    def __enter__(self) -> "RayExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _shutdown(ray: Any, actors: list[Any], connected_here: bool, temp: str | None = None, driver: DriverState | None = None) -> None:
    """Kill our actors; disconnect if we connected, which also stops a local Ray we started (raylet, object store,
    workers), and reap its processes; then remove that local Ray's ``temp`` folder and give ``driver`` back."""
    try:
        _stop(ray, actors, connected_here)
    finally:
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
        if driver is not None:
            driver.restore()


def _stop(ray: Any, actors: list[Any], connected_here: bool) -> None:
    if not ray.is_initialized():
        return
    for a in actors:
        try:
            ray.kill(a, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
    if connected_here:
        children = ray_children(ray)  # before the shutdown forgets them
        with random_kept():
            keeping_signal_handlers(ray.shutdown)
        reap(children)


def keeping_signal_handlers(stop: Callable[[], None]) -> None:
    """Run ``stop`` (``ray.shutdown``) with this process's SIGINT/SIGTERM/SIGHUP handlers kept in force.

    Ray's shutdown resets SIGTERM to its default at the C level when Ray's failure
    signal handler was installed (chillfl's driver does not install it:
    ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``, see :func:`import_ray`), while Python
    still reports the old handler: a second SIGTERM during or after it killed
    chillfl with nothing said (exit -15; tests/private_net/test_ray.py). Where it
    is installed all the same, ``stop`` runs in a helper thread while the main
    thread re-asserts the handlers every 5 ms, and once more when it is done; a
    signal inside those 5 ms can still kill, hence the environment variable.
    """
    if threading.current_thread() is not threading.main_thread():
        stop()
        return
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    failed: list[BaseException] = []

    def run() -> None:
        try:
            stop()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failed.append(exc)

    worker = threading.Thread(target=run, name="chillfl-ray-shutdown", daemon=True)
    worker.start()
    while True:
        for sig, handler in handlers.items():
            if handler is not None:
                signal.signal(sig, handler)
        if not worker.is_alive():
            break
        worker.join(0.005)
    if failed:
        raise failed[0]

"""Executor choice: the config's ``executor`` name -> a ready :class:`Executor`.

``sequential`` is the reference; ``vectorized`` trains a round's clients as one
vmapped step (:mod:`chillfl.executors.vectorized`); ``processes`` uses a pool of
worker processes (:mod:`chillfl.executors.processes`). All three give the same
result for the same seed (vectorized: up to float rounding; processes:
bitwise, at equal intra-op thread counts).

``auto`` picks by round size and cores (:func:`choose_executor`) and logs its
choice; the run records what trained its clients, a fallback included, in
``summary.json``'s ``environment`` (:func:`executor_record`). Timing one local round (32 clients of 64 to 157 samples, batch 16,
one intra-op thread, 2 cores: ``python benchmarks/executor_sizes.py``), vectorised with 2 worker threads vs sequential was 3.6x faster for
a 5k-parameter MLP, 1.7x for a 6k-parameter CNN, 2.7x for a 197k-parameter
MLP and 1.7x for the 879k-parameter McMahan CNN, where the process pool was
1.6x with 2.4x the memory (benchmark workload 1). On one worker the big CNN
was 0.88x, hence the size limit there: larger stacked states stop fitting in
cache while the per-call overheads that vmap amortises matter less.

Models with large convolutions on the CPU (workload 1's McMahan CNN): the
vectorised executor trains them one client per chunk, unvmapped, on its worker
threads (:func:`chillfl.executors.vectorized.per_client_steps`), so ``auto`` still picks
it on 2 worker threads: the cores in use without the process pool's copies
and memory, and the sequential executor's bits. The config's ``memory_format``
(``auto``: channels-last here) and ``precision`` act inside every executor's
step. Timing rounds of 4 McMahan-CNN clients x 500 samples, one epoch, batch 50
(driven as ``benchmarks/mode_chillfl.py`` drives a run, 2026-11-22, 2-core Xeon
with AVX-512 bf16, one intra-op thread, the machine saturated by other jobs,
so wall times did not separate the executors): CPU seconds a round
sequential / vectorized were 1.39 / 1.48 contiguous fp32, 1.04 / 1.12
channels-last fp32, 0.92 / 1.09 contiguous bf16, 0.56 / 0.65 channels-last
bf16, against 1.33 for a plain PyTorch loop on one thread; wall seconds
(best of 2) sequential / vectorized / processes were 3.37 / 3.23 / 4.39
contiguous fp32, 2.50 / 2.40 / 2.30 channels-last fp32 and 1.44 / 1.72 / 1.85
channels-last bf16. No executor was consistently faster, so the choice
below is unchanged.

Choices
-------
* ``auto``: one client per round -> sequential; otherwise vectorized when it
  has more than one worker thread or the model has at most
  :data:`VECTORIZE_MAX_PARAMS` parameters, else sequential. When the model
  cannot be vmapped (dropout, ...) the vectorised executor falls back to a
  process pool (more than one core and a picklable model) or to sequential.
* ``auto`` on a GPU (any device but the CPU): vectorized whenever more than one
  client trains per round; its chunks are sized from free device memory.
* ``processes`` uses ``min(cores, clients per round)`` workers (no idle ones).
* ``vectorized`` trains its chunks on ``cores // threads`` threads
  (:func:`vectorized_workers`; one when ``threads = 0``).
"""

from __future__ import annotations

import logging
import inspect
import io
import pickle
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, NamedTuple

from torch import nn

from chillfl.config import EXECUTORS
from chillfl.executors.sequential import Executor, SequentialExecutor
from chillfl.executors.pools import WorkerPools
from chillfl.executors.processes import ProcessExecutor, default_workers, main_importable
from chillfl.engine.protocol import ClientSide
from chillfl.executors.ray_executor import RayExecutor
from chillfl.executors.vectorized import VectorizedExecutor
from chillfl.errors import ConfigError, choice_error
from chillfl.training.local import LocalSpec

log = logging.getLogger(__name__)

VECTORIZE_MAX_PARAMS = 250_000
"""Largest model (trainable + buffer elements) that ``auto`` trains vectorised on a single worker."""


def choose_executor(num_parameters: int, clients_per_round: int, workers: int) -> str:
    """The executor ``auto`` uses (see the module's Choices); ``workers``: the vectorised executor's threads."""
    if clients_per_round <= 1:
        return "sequential"
    if workers > 1 or num_parameters <= VECTORIZE_MAX_PARAMS:
        return "vectorized"
    return "sequential"


def accelerator_executor(clients_per_round: int) -> str:
    """``auto`` on a GPU: vectorised whenever a round has clients to batch (the CPU's size limit is a cache effect)."""
    return "vectorized" if clients_per_round > 1 else "sequential"


def vectorized_workers(threads: int, cores: int) -> int:
    """Threads the vectorised executor trains chunks on: the cores left after intra-op threads.

    ``threads`` is the config's intra-op thread count (0: torch's default,
    which already uses every core), so the two never oversubscribe the cores.
    """
    if threads == 0:
        return 1
    return max(1, cores // threads)


def follows_cores(executor: str, device: str) -> bool:
    """Whether ``executor``'s float path follows the cores this process may use (its CPU affinity), not only ``threads``.

    On the CPU ``vectorized`` chunks a round's clients for its ``cores // threads`` worker threads
    (:meth:`~chillfl.executors.vectorized.VectorizedExecutor._balanced_chunks`), and a grouped convolution over
    another number of clients rounds differently (the FLex&Chill CNN on digits: other bits at 1, 2, 3 and 6 cores; an MLP's:
    the same); ``auto`` picks its executor by the cores. ``sequential``, ``processes`` and Ray train client by client,
    and on an accelerator the vectorised chunks follow free device memory instead (one worker thread).
    """
    return device == "cpu" and executor in ("vectorized", "auto")


@dataclass(frozen=True)
class ExecutorSpec:
    """What an executor is built from: the model template, the private-training objective, the protocol's client side."""

    model: nn.Module
    spec: LocalSpec
    client: ClientSide
    num_parameters: int
    clients_per_round: int
    threads: int
    device: str = "cpu"
    pools: WorkerPools | None = None
    """Worker processes lent by a sweep (:mod:`chillfl.executors.pools`); None: a process executor starts its own."""

    def process_executor(self, workers: int) -> ProcessExecutor:
        """A process-pool executor of ``workers`` workers with the run's intra-op threads each: the sweep's pool of that size, or its own.

        A worker trains at the run's ``threads`` (1 for ``threads = 0``, torch's default, no fixed count), the float path
        of the sequential executor at that count: with one thread a worker, ``threads = 2`` was bitwise another run.
        """
        threads = max(1, self.threads)
        if self.pools is None:
            return ProcessExecutor(self.model, self.spec, workers=workers, client=self.client, threads_per_worker=threads)
        return ProcessExecutor(self.model, self.spec, client=self.client, threads_per_worker=threads, pool=self.pools.processes(workers, threads))


def _picklable(parts: ExecutorSpec) -> bool:
    """Whether the model template, the objective and the client side can be sent to worker processes."""
    return unsendable((parts.model, parts.spec, parts.client)) is None


class _MainFinder(pickle.Pickler):
    """A pickler that notes the classes and functions it pickles by reference from an interactive ``__main__``
    (a notebook, ``python -c``, ``python - < script.py``): they pickle here, yet a spawned worker cannot import them."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO())
        self.found: list[str] = []

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, type) or inspect.isfunction(obj):
            if getattr(obj, "__module__", None) == "__main__" and not main_importable():
                self.found.append(obj.__qualname__)
        return NotImplemented


class Unsendable(NamedTuple):
    """Why parts cannot reach worker processes (:func:`unsendable`)."""

    why: str
    placed: bool
    """Whether it is where a class or function is defined (a notebook cell, a local function: pickle finds no importable
    name), which moving it into a module mends; False for an object pickle refuses whatever its module (torch's
    parametrized modules: "only supported through state_dict()")."""


def unsendable(parts: Any) -> Unsendable | None:
    """Why ``parts`` cannot reach spawned worker processes (they cannot be pickled, or name a user's class that
    the workers cannot import), or None when they can."""
    finder = _MainFinder()
    try:
        finder.dump(parts)
    except Exception as exc:  # noqa: BLE001 - any pickling failure: the parts cannot travel
        return Unsendable(f"{type(exc).__name__}: {exc}", isinstance(exc, (pickle.PicklingError, AttributeError)))
    if finder.found:
        return Unsendable(f"{', '.join(sorted(set(finder.found)))} defined in an interactive __main__, which worker processes cannot import", True)
    return None


def make_parallel_executor(name: str, parts: ExecutorSpec) -> Executor:
    """Build the executor called ``name`` (one of :data:`chillfl.config.EXECUTORS`)."""
    clients = parts.clients_per_round
    cores = default_workers()
    workers = vectorized_workers(parts.threads, cores)
    pool_size = max(1, min(cores // max(1, parts.threads), clients))  # no idle worker processes, no more threads than cores
    on_cpu = parts.device == "cpu"
    fallback: Callable[[], Executor] | None = None
    if name == "auto":
        name = choose_executor(parts.num_parameters, clients, workers) if on_cpu else accelerator_executor(clients)
        if name == "vectorized" and workers > 1 and on_cpu and _picklable(parts):
            fallback = partial(parts.process_executor, pool_size)
        log.info(
            "executor auto -> %s (%d model parameters, %d clients per round, %d cores, %d worker threads; if the model cannot be vmapped: %s)",
            name, parts.num_parameters, clients, cores, workers, "processes" if fallback else "sequential",
        )
        if name != "vectorized" and parts.spec.compiled:  # asked for, and not given: said once
            log.warning("compile: executor auto chose %r for this run, whose steps are not compiled; executor = \"vectorized\" compiles them", name)
    if name == "sequential":
        return SequentialExecutor(parts.model, parts.spec, client=parts.client)
    if name == "vectorized":
        fallback_name = "processes" if fallback else "sequential"
        fallback = fallback or partial(SequentialExecutor, parts.model, parts.spec, client=parts.client)
        return VectorizedExecutor(parts.model, parts.spec, workers=workers if on_cpu else 1, fallback=fallback, fallback_name=fallback_name, client=parts.client)
    if name == "processes":
        if not on_cpu:
            raise ConfigError("executor", f"'processes' trains on the CPU; on device {parts.device!r} use 'vectorized', 'sequential' or 'auto'")
        return parts.process_executor(pool_size)
    raise choice_error("executor", name, EXECUTORS)


def executor_record(executor: Executor) -> dict[str, str | int]:
    """What trained the run's clients, for ``summary.json``'s ``environment``: ``executor`` (a
    :data:`~chillfl.config.EXECUTORS` name), ``executor_workers`` and, for ``vectorized``, the ``executor_fallback``
    it would have taken; where it took it (a step could not be vmapped), ``executor`` names the fallback, with
    ``executor_fallback_from`` and ``executor_fallback_reason``.

    Why: ``config.toml`` keeps ``executor = "auto"`` (a rerun or a resume chooses again, perhaps on other cores),
    and the choice, whose bits can differ (docs/reproducibility.md), was only a log line.
    """
    if isinstance(executor, VectorizedExecutor) and (taken := executor.fell_back_to) is not None:
        return {**executor_record(taken), "executor_fallback_from": "vectorized", "executor_fallback_reason": executor.fallback_reason or ""}
    record: dict[str, str | int] = {"executor": _EXECUTOR_NAMES.get(type(executor), type(executor).__qualname__)}
    workers = getattr(executor, "workers", 1)
    record["executor_workers"] = workers if isinstance(workers, int) else 1
    if isinstance(executor, VectorizedExecutor):
        record["executor_fallback"] = executor.fallback_name
    return record


_EXECUTOR_NAMES: dict[type, str] = {
    SequentialExecutor: "sequential", VectorizedExecutor: "vectorized", ProcessExecutor: "processes", RayExecutor: "ray",
}

"""Process executor: a pool of worker processes, tensors exchanged through shared memory.

Each worker (``spawn`` start method, so it is safe with threads and on every
OS) receives the model template and the :class:`LocalSpec` once, at start-up,
and then runs :func:`~chillfl.training.local.train_client` on the jobs it
pulls from a shared queue. Jobs and results travel as small pickles whose
tensors live in shared memory: every distinct state dict (the round's global
model is one object shared by all clients) is packed once per round into one
flat shared buffer per dtype, so a worker maps it instead of receiving a
copy. Results are collected by job index and returned in job order; a job's
outcome depends only on the job (its own seed), never on which worker ran it.

Determinism: a worker runs with ``threads_per_worker`` intra-op threads (1 by
default). Results are bitwise identical to the sequential executor run in a
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
* A failing job raises :class:`WorkerError` in the parent (with the worker's
  traceback) after the round's other jobs have been drained, so the pool stays
  usable; a worker that dies breaks the pool, which is then shut down.
"""

from __future__ import annotations

import os
import queue
import traceback
import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.multiprocessing as tmp
import torch.utils._pytree as pytree
from torch import nn

from chillfl.engine.executors import ClientJob
from chillfl.training.linear_factors import factored_linears
from chillfl.training.local import LocalOutcome, LocalSpec, train_client

_POLL_S = 0.5
_JOIN_S = 5.0


class WorkerError(RuntimeError):
    """A job failed (or a worker died) in the process pool."""


@dataclass(frozen=True)
class _Slot:
    """Where one tensor lives inside a packed tree's flat buffers."""

    buffer: str
    offset: int
    shape: tuple[int, ...]


@dataclass
class PackedTree:
    """A pytree whose tensors were replaced by slots into one shared flat buffer per dtype."""

    structure: Any
    buffers: dict[str, torch.Tensor]

    def unpack(self) -> Any:
        """The original tree, every tensor a view into the (shared) flat buffers."""

        def view(leaf: Any) -> Any:
            if not isinstance(leaf, _Slot):
                return leaf
            n = 1
            for d in leaf.shape:
                n *= d
            return self.buffers[leaf.buffer][leaf.offset : leaf.offset + n].view(leaf.shape)

        return pytree.tree_map(view, self.structure)


def pack_tree(tree: Any) -> PackedTree:
    """Copy every tensor of ``tree`` into one flat shared-memory buffer per dtype."""
    parts: dict[str, list[torch.Tensor]] = {}
    sizes: dict[str, int] = {}

    def slot(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor):
            return leaf
        key = str(leaf.dtype).removeprefix("torch.")
        offset = sizes.get(key, 0)
        parts.setdefault(key, []).append(leaf.detach().reshape(-1))
        sizes[key] = offset + leaf.numel()
        return _Slot(key, offset, tuple(leaf.shape))

    structure = pytree.tree_map(slot, tree)
    buffers = {k: torch.cat(v).share_memory_() for k, v in parts.items()}
    return PackedTree(structure, buffers)


class _Packer:
    """Packs each distinct tree once per round (identity of its tensors), so shared states are sent once."""

    def __init__(self) -> None:
        self._cache: dict[tuple[Any, ...], PackedTree] = {}

    def __call__(self, tree: Any) -> PackedTree:
        leaves, spec = pytree.tree_flatten(tree)
        key = (str(spec), *(id(v) for v in leaves))
        if key not in self._cache:
            self._cache[key] = pack_tree(tree)
        return self._cache[key]


@dataclass
class _Task:
    """One job as sent to a worker: states packed into shared memory, ``index`` = position in the round."""

    index: int
    client_id: int
    start: PackedTree
    x: torch.Tensor
    y: torch.Tensor
    lr: float
    temperature: float
    context: PackedTree
    seed: int


def _worker_main(model: nn.Module, spec: LocalSpec, threads: int, tasks: Any, results: Any) -> None:
    """Worker loop: train each task, send back (index, packed outcome) or (index, error text)."""
    torch.set_num_threads(threads)
    model = factored_linears(model)
    while True:
        task: _Task | None = tasks.get()
        if task is None:
            return
        try:
            out = train_client(
                model,
                task.start.unpack(),
                task.x,
                task.y,
                spec=spec,
                lr=task.lr,
                temperature=task.temperature,
                context=task.context.unpack(),
                generator=torch.Generator().manual_seed(task.seed),
            )
            results.put((task.index, True, (pack_tree(out.params), out.num_steps, out.mean_loss)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises
            text = f"client {task.client_id}: {type(exc).__name__}: {exc}\n--- worker traceback ---\n{traceback.format_exc()}"
            results.put((task.index, False, text))


def _shutdown(processes: list[Any], tasks: Any, results: Any) -> None:
    """Stop every worker (sentinel, then terminate / kill if needed) and release the queues."""
    processes = [p for p in processes if p.pid is not None]  # started ones only
    for p in processes:
        if p.is_alive():
            try:
                tasks.put(None)
            except (OSError, ValueError):
                break
    for p in processes:
        p.join(_JOIN_S)
        if p.is_alive():
            p.terminate()
            p.join(_JOIN_S)
        if p.is_alive():
            p.kill()
            p.join()
    for q in (tasks, results):
        q.cancel_join_thread()
        q.close()


def default_workers() -> int:
    """Cores this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class ProcessExecutor:
    """Runs the round's jobs on ``workers`` spawned processes; see the module docstring."""

    def __init__(self, model: nn.Module, spec: LocalSpec, *, workers: int | None = None, threads_per_worker: int = 1) -> None:
        self.workers = workers if workers is not None else default_workers()
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if threads_per_worker < 1:
            raise ValueError(f"threads_per_worker must be >= 1, got {threads_per_worker}")
        ctx = tmp.get_context("spawn")
        self._tasks = ctx.Queue()
        self._results = ctx.Queue()
        self._processes = [
            ctx.Process(
                target=_worker_main,
                args=(model, spec, threads_per_worker, self._tasks, self._results),
                name=f"chillfl-worker-{i}",
                daemon=True,
            )
            for i in range(self.workers)
        ]
        self._finalizer = weakref.finalize(self, _shutdown, self._processes, self._tasks, self._results)
        for p in self._processes:
            p.start()
        self._broken: str | None = None

    @property
    def pids(self) -> list[int]:
        """Process ids of the workers (for monitoring and tests)."""
        return [p.pid for p in self._processes if p.pid is not None]

    def run(self, jobs: Sequence[ClientJob]) -> list[LocalOutcome]:
        if self._broken:
            raise WorkerError(f"the process pool is unusable: {self._broken}")
        if not self._finalizer.alive:
            raise WorkerError("the process executor is closed")
        pack = _Packer()
        next_job = 0
        in_flight = 0
        outcomes: dict[int, LocalOutcome] = {}
        errors: list[tuple[int, str]] = []
        while next_job < len(jobs) or in_flight:
            while next_job < len(jobs) and in_flight < 2 * self.workers:
                self._tasks.put(self._task(next_job, jobs[next_job], pack))
                next_job += 1
                in_flight += 1
            index, ok, payload = self._next_result()
            in_flight -= 1
            if ok:
                packed, steps, loss = payload
                outcomes[index] = LocalOutcome(packed.unpack(), steps, loss)
            else:
                errors.append((index, payload))
        if errors:
            raise WorkerError(min(errors)[1])
        return [outcomes[i] for i in range(len(jobs))]

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> "ProcessExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @staticmethod
    def _task(index: int, job: ClientJob, pack: _Packer) -> _Task:
        x, y = job.x.share_memory_(), job.y.share_memory_()
        return _Task(index, job.client_id, pack(dict(job.start)), x, y, job.lr, job.temperature, pack(dict(job.context)), job.seed)

    def _next_result(self) -> tuple[int, bool, Any]:
        while True:
            try:
                return self._results.get(timeout=_POLL_S)
            except queue.Empty:
                dead = [p for p in self._processes if not p.is_alive()]
                if dead:
                    self._broken = f"worker {dead[0].name} died with exit code {dead[0].exitcode}"
                    self.close()
                    raise WorkerError(self._broken) from None


"""Worker processes and Ray actors kept from one run to the next, so a sweep starts them once.

A run's ``processes`` or ``ray`` executor starts its workers (each imports
torch: seconds apiece, and a local Ray cluster on top for ``ray``) and stops
them at its end. A comparison runs dozens of such runs one after another, so
``chillfl compare`` lends every run the workers of one :class:`WorkerPools`:
the executor of each run is built as usual, on borrowed workers, and leaves
them up when it closes; the pools close with the sweep (at its end, after an
error, after SIGINT/SIGTERM).

Borrowing changes no result: a process worker unpickles each executor's model,
objective and client side under that executor's own key, and a Ray actor
drops the previous run's executor and client data when it meets another
run's parts (tests/test_worker_pools.py, tests/private_net/test_ray.py).

One pool and one set of Ray actors at a time: a run that needs another worker
count or thread count (processes), or another ``[ray]`` table or thread count
(Ray), gets fresh ones and the old ones stop. So a sweep never holds more
workers than one of its runs would start. A pool that broke (a worker died,
or a Ray actor was lost for good) is replaced by a fresh one for the next run.
"""

from __future__ import annotations

from typing import Any

from chillfl.config import RayConfig
from chillfl.executors.processes import WorkerPool
from chillfl.executors.ray_executor import RayWorkers


class WorkerPools:
    """Process pools and Ray workers lent to one run after another; see the module docstring."""

    def __init__(self) -> None:
        self._processes: tuple[tuple[int, int], WorkerPool] | None = None
        self._ray: tuple[tuple[RayConfig, int], RayWorkers] | None = None
        self.started = 0
        """How many pools or Ray worker sets were started (tests, and the sweep's log)."""

    def processes(self, workers: int, threads: int = 1) -> WorkerPool:
        """The pool of ``workers`` processes with ``threads`` intra-op threads each, started on first use."""
        key = (workers, threads)
        if self._processes is not None and self._processes[0] == key and self._processes[1].usable:
            return self._processes[1]
        if self._processes is not None:  # one pool at a time: never more processes than a run would start
            self._processes[1].close()
        pool = WorkerPool(workers, threads)
        self._processes = (key, pool)
        self.started += 1
        return pool

    def ray(self, options: RayConfig, threads: int, clients_per_round: int) -> RayWorkers:
        """The Ray actors for the ``[ray]`` table ``options`` (and the connection, or a local Ray), started on first use.

        With ``workers = 0`` the first run's ``clients_per_round`` caps how many actors start; a later run
        with more clients a round shares them. Another ``[ray]`` table or thread count replaces them: one
        set of actors at a time, since two could not be placed side by side on a cluster the first one fills.
        """
        key = (options, threads)
        if self._ray is not None and self._ray[0] == key and self._ray[1].usable:
            return self._ray[1]
        if self._ray is not None:
            self._ray[1].close()
        workers = RayWorkers(options, threads=threads, clients_per_round=clients_per_round)
        self._ray = (key, workers)
        self.started += 1
        return workers

    def close(self) -> None:
        """Stop the pool and the Ray actors (and a local Ray started for them)."""
        if self._processes is not None:
            self._processes[1].close()
        if self._ray is not None:
            self._ray[1].close()
        self._processes = self._ray = None

    def __enter__(self) -> "WorkerPools":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

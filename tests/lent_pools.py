"""One :class:`~chillfl.executors.pools.WorkerPools` per test process, lent to the process-pool runs of the shared
run helpers (``methods_e2e.records``, ``kd_helpers.records``) as ``chillfl compare`` lends one to a sweep's runs.

Each run still builds its own process executor, which unpickles the run's model, objective and client side
afresh on the workers (borrowing changes no result: tests/test_worker_pools.py, and the resume cases of
tests/test_resume_every_method.py run on lent workers too); only the workers (each imports torch, about 4 CPU s
for a run's pair) start once per test process instead of once per run. A run that needs another worker or thread
count gets fresh workers, and a broken pool is replaced. ``tests/conftest.py`` stops them when the session ends.
The tests of a pool's own start, shutdown and failures (tests/test_executors.py, tests/test_process_lifetime.py,
tests/test_worker_pools.py) start their own.
"""

from __future__ import annotations

from chillfl.executors.pools import WorkerPools

_POOLS: WorkerPools | None = None


def pools() -> WorkerPools:
    """This test process's lent workers (none start until a process-pool run asks for them)."""
    global _POOLS
    if _POOLS is None:
        _POOLS = WorkerPools()
    return _POOLS


def close() -> None:
    """Stop the lent workers (the session's end)."""
    global _POOLS
    if _POOLS is not None:
        _POOLS.close()
        _POOLS = None

"""A sweep lends its runs one set of worker processes (:mod:`chillfl.executors.pools`): started once, results unchanged, gone at the end.

``chillfl compare`` with ``executor = "processes"`` used to start a pool of spawned workers (each
importing torch) for every run and stop it at the run's end. Here its runs share one pool, each
run's results are bitwise those of the sequential executor (one intra-op thread), and the pool's
processes are gone when the sweep ends, and when it is interrupted. Ray's actors: the same in
``tests/private_net/test_ray.py``.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

import chillfl
from chillfl.executors.pools import WorkerPools
from chillfl.executors.processes import WorkerPool
from chillfl.sweeps import run as sweep_module  # where the comparison's runs start
from chillfl.runner import RunInterrupted
from procs import alive

CONFIG: dict[str, Any] = {
    "dataset": {"name": "digits"},
    "model": {"name": "mlp", "hidden": [16]},
    "device": "cpu",
    "threads": 1,
    "federation": {"num_clients": 6, "clients_per_round": 2, "rounds": 2},
    "client": {"lr": 0.05, "batch_size": 32},
    "eval": {"client_split_size": 20},
}


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[WorkerPool]:
    """Every WorkerPool built while the test runs."""
    pools: list[WorkerPool] = []
    build = WorkerPool.__init__

    def recorded(self: WorkerPool, *args: Any, **kwargs: Any) -> None:
        build(self, *args, **kwargs)
        pools.append(self)

    monkeypatch.setattr(WorkerPool, "__init__", recorded)
    return pools



def _compare(executor: str) -> Any:
    return chillfl.compare(config={**CONFIG, "executor": executor}, grid=["temperature=1,0.5"], seeds=[0, 1], write=False, progress=False)


def test_a_sweeps_runs_share_one_pool_and_match_sequential(started: list[WorkerPool]) -> None:
    shared = _compare("processes")
    assert len(started) == 1  # 4 runs, one pool (it used to be one per run)
    assert not any(alive(pid) for pid in started[0].pids)  # stopped with the sweep
    reference = _compare("sequential")
    assert len(started) == 1
    assert len(shared.outputs) == 4 and {k: o.records for k, o in shared.outputs.items()} == {k: o.records for k, o in reference.outputs.items()}  # bitwise


def test_an_interrupted_sweep_stops_its_pool(started: list[WorkerPool], monkeypatch: pytest.MonkeyPatch) -> None:
    real = sweep_module.run_experiment
    calls: list[int] = []

    def second_run_interrupted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            assert kwargs["pools"] is not None and started and all(alive(pid) for pid in started[0].pids)  # the first run's pool, still up
            raise RunInterrupted(signal.SIGTERM, None, 0)
        return real(*args, **kwargs)

    monkeypatch.setattr(sweep_module, "run_experiment", second_run_interrupted)
    with pytest.raises(RunInterrupted):
        _compare("processes")
    assert len(started) == 1 and not any(alive(pid) for pid in started[0].pids)


def test_one_pool_at_a_time_and_a_broken_one_is_replaced(started: list[WorkerPool]) -> None:
    with WorkerPools() as pools:
        two = pools.processes(2)
        assert pools.processes(2) is two and pools.started == 1
        one = pools.processes(1)  # another worker count: the old pool stops, never two side by side
        assert one is not two and not two.usable and pools.started == 2
        os.kill(one.pids[0], signal.SIGKILL)  # a worker lost: the pool is unusable once it notices
        with pytest.raises(Exception, match="died"):
            one.round([object()], lambda payload: payload)
        assert not one.usable
        fresh = pools.processes(1)
        assert fresh is not one and fresh.usable and pools.started == 3
    assert not fresh.usable and not any(alive(pid) for p in started for pid in p.pids)


class _SlowToPickle:
    """Keeps a queue's feeder thread busy: the feeder pickles what it sends."""

    def __reduce__(self) -> tuple[Any, ...]:
        import time

        time.sleep(0.5)
        return (int, ())


def test_a_closed_pool_waits_for_its_task_queues_feeder_thread() -> None:
    """The feeder holds two of the queue's named semaphores; when it ended after the queue itself was gone, it released
    them, and an interpreter exiting meanwhile stopped it half-way: multiprocessing's resource tracker then printed
    a leak warning after chillfl's last line (1 run in 15 of a double SIGTERM under load). Closing now waits for it."""
    import multiprocessing

    from chillfl.executors.processes import _Results, _shutdown, _Tasks

    ctx = multiprocessing.get_context("spawn")
    tasks, results = _Tasks(ctx=ctx), _Results(ctx=ctx)
    tasks.put(_SlowToPickle())  # starts the feeder, which takes 0.5 s over it
    feeder = tasks._thread  # type: ignore[attr-defined]
    assert feeder.is_alive()
    _shutdown([], tasks, results)
    assert not feeder.is_alive()

"""One local Ray and one pool of Flower's ClientApp actors that the simulations of a test class share
(tests/private_net/test_flower.py, test_plugins_on_backends.py): each Ray start and stop, and each actor's imports
(torch, chillfl), took ~25 of a simulation's ~30 s on a loaded 2-core machine. Each simulation still starts Flower's
own engine (SuperNodes, the ServerApp, every node's ``Context.state``); its clients run on the shared actors."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from typing import Any, Iterator

import pytest


class SharedActors:
    """Flower's pool of ClientApp actors on a test class's Ray, lent to each simulation's Ray backend in turn."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.actors = pool.num_actors
        self.lent = 0  # simulations that took the pool
        self.jobs = 0  # messages its actors ran
        submit = pool.submit

        def counted(*args: Any) -> Any:
            self.jobs += 1
            return submit(*args)

        pool.submit = counted


@pytest.fixture(scope="class", name="shared_actors")
def shared_actors_fixture() -> Iterator[SharedActors]:
    """``shared_actors``, for a class whose module imports this: one local Ray, started as ``run_simulation`` starts its
    own (Flower's Ray backend, from a thread with SIGTERM and SIGHUP blocked, the same ``init_args`` and client
    resources), and one pool of Flower's ClientApp actors on it, which
    every simulation of the class uses: Flower's Ray backend builds no pool and stops no Ray of its own meanwhile.
    Each Ray start and stop, and each actor's imports (torch, chillfl), took ~25 of a simulation's ~30 s on a loaded
    2-core machine. What a run's own Ray start and stop must do is checked by test_flower.py's
    ``test_simulation_starts_and_stops_its_own_ray_and_equals_chillfl_runtime``.

    The actors' import path is the driver's ``sys.path`` when the Ray starts (Flower's Ray backend): a class whose
    simulations import a user's modules puts their folder there before this fixture starts."""
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

    from chillfl.executors.processes import default_workers
    from chillfl.executors.ray_executor import import_ray, stop_signals_blocked, without_ray_tip

    ray = import_ray()
    assert not ray.is_initialized()
    temp = tempfile.mkdtemp(prefix="f8s", dir="/tmp")  # short: Ray's socket paths
    backend_config = {"client_resources": {"num_cpus": 1.0, "num_gpus": 0.0},
                      "init_args": {"num_cpus": default_workers(), "include_dashboard": False, "_temp_dir": temp}}
    started: list[Any] = []
    ready, done = threading.Event(), threading.Event()
    pythonpath = os.environ.get("PYTHONPATH")

    def hold() -> None:
        """Starts the Ray and the pool, and stops them when the class is done: from one thread that lives as long as
        they do (as run_simulation's does), since Ray's processes die with the thread that started them (PDEATHSIG)."""
        try:
            with stop_signals_blocked(started_local=True), without_ray_tip():
                backend = RayBackend(backend_config)
                backend.build(lambda: None)  # the pool; each simulation lends it its own app_fn (lend, below)
            started.append(backend.pool)
        finally:
            ready.set()
        done.wait()
        backend.pool.terminate_all_actors()
        ray.shutdown()

    thread = threading.Thread(target=hold, name="shared-ray")  # not the main thread, which Ray would take SIGTERM from
    thread.start()
    ready.wait()
    if pythonpath is None:  # Flower's init_ray wrote the driver's sys.path there
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = pythonpath
    try:
        assert started, "the shared Ray did not start"
        shared = SharedActors(started[0])

        def lend(self: Any, app_fn: Any) -> None:
            self.pool, self.app_fn = shared.pool, app_fn
            shared.lent += 1

        def keep(self: Any) -> None:  # the pool's actors and the Ray stay for the class's next simulation
            self.pool = None

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(RayBackend, "build", lend)
            patch.setattr(RayBackend, "terminate", keep)
            yield shared
    finally:
        done.set()
        thread.join()
        shutil.rmtree(temp, ignore_errors=True)

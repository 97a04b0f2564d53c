"""Executor choice: the config's ``executor`` name -> a ready :class:`Executor`.

``sequential`` is the reference; ``vectorized`` trains a round's clients as one
vmapped step (:mod:`chillfl.engine.vectorized`); ``processes`` uses a pool of
worker processes (:mod:`chillfl.engine.processes`). All three give the same
result for the same seed (vectorized: up to float rounding; processes:
bitwise, at equal intra-op thread counts).

``auto`` picks by model size and round size (:func:`choose_executor`) and logs
its choice. The thresholds come from timing one local round (32 clients of 64
to 157 samples, batch 16, one thread, 8x8 digits): vectorized vs sequential
was 2.5x faster for a 5k-parameter MLP, 1.9x for a 29k-parameter CNN, 1.2x
for a 189k-parameter CNN and on par for a 199k-parameter MLP (the benchmark's
workload 2 then measured vectorized 1.7x faster than processes for that MLP,
so the threshold sits above it), because larger
stacked states stop fitting in cache while per-call overheads, which vmap
amortises, matter less.

Choices
-------
* ``auto``: one client per round -> sequential; models up to
  :data:`VECTORIZE_MAX_PARAMS` parameters -> vectorized (it falls back to
  sequential by itself when the step cannot be vmapped); larger models with
  more than one usable core -> processes with ``min(cores, clients)``
  workers, if the model and objective can be pickled; otherwise sequential.
* ``processes`` uses ``min(cores, clients per round)`` workers (no idle ones).
* ``vectorized`` trains its chunks on ``cores // threads`` threads
  (:func:`vectorized_workers`; one when ``threads = 0``).
"""

from __future__ import annotations

import logging
import pickle

from chillfl.config import EXECUTORS
from chillfl.engine.executors import Executor, SequentialExecutor
from chillfl.engine.processes import ProcessExecutor, default_workers
from chillfl.engine.setup import Experiment
from chillfl.engine.vectorized import VectorizedExecutor
from chillfl.errors import choice_error

log = logging.getLogger(__name__)

VECTORIZE_MAX_PARAMS = 250_000
"""Largest model (trainable + buffer elements) that ``auto`` trains vectorised."""


def choose_executor(num_parameters: int, clients_per_round: int, cores: int) -> str:
    """The executor ``auto`` uses (see the module's Choices)."""
    if clients_per_round <= 1:
        return "sequential"
    if num_parameters <= VECTORIZE_MAX_PARAMS:
        return "vectorized"
    if cores > 1:
        return "processes"
    return "sequential"


def vectorized_workers(threads: int, cores: int) -> int:
    """Threads the vectorised executor trains chunks on: the cores left after intra-op threads.

    ``threads`` is the config's intra-op thread count (0: torch's default,
    which already uses every core), so the two never oversubscribe the cores.
    """
    if threads == 0:
        return 1
    return max(1, cores // threads)


def _picklable(exp: Experiment) -> bool:
    """Whether the model template and the objective can be sent to worker processes."""
    try:
        pickle.dumps((exp.model, exp.spec))
    except Exception:  # noqa: BLE001 - any pickling failure means "keep it in-process"
        return False
    return True


def make_parallel_executor(name: str, exp: Experiment) -> Executor:
    """Build the executor called ``name`` (one of :data:`chillfl.config.EXECUTORS`) for ``exp``."""
    clients = exp.config.federation.sample_size()
    if name == "auto":
        size = sum(v.numel() for v in exp.initial_state.values())
        cores = default_workers()
        name = choose_executor(size, clients, cores)
        if name == "processes" and not _picklable(exp):
            name = "sequential"
        log.info("executor auto -> %s (%d model parameters, %d clients per round, %d cores)", name, size, clients, cores)
    if name == "sequential":
        return SequentialExecutor(exp.model, exp.spec)
    if name == "vectorized":
        return VectorizedExecutor(exp.model, exp.spec, workers=vectorized_workers(exp.config.threads, default_workers()))
    if name == "processes":
        return ProcessExecutor(exp.model, exp.spec, workers=max(1, min(default_workers(), clients)))
    raise choice_error("executor", name, EXECUTORS)

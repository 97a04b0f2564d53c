"""The round loop: the one loop every protocol runs in, under every executor.

Read top to bottom, one round is::

    sampled = sample_clients(seed, round)          # sorted client ids, own RNG stream
    tasks   = protocol.configure(round, sampled)   # a typed downlink per client
    replies = executor.map(tasks)                  # the client updates (pure)
    record  = protocol.server_update(round, tasks, replies)   # in client-id order
    callbacks: writer, plots, checkpoint, ...      # by the caller, per yielded record

Every random choice draws from a stream derived from (seed, purpose, round,
client), so a run is a pure function of its config, and a run resumed at
round r continues exactly as if it had never stopped: nothing but the
protocol's ``state_dict()`` carries over between rounds.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np

from chillfl.engine.executors import Executor
from chillfl.engine.protocol import ServerProtocol
from chillfl.training.local import derive_seed


def sample_clients(seed: int, round: int, num_clients: int, k: int) -> list[int]:
    """k distinct client ids for this round, sorted; independent of every other random stream."""
    rng = np.random.default_rng(derive_seed(seed, "sample", round))
    if k >= num_clients:
        return list(range(num_clients))
    return sorted(int(c) for c in rng.choice(num_clients, size=k, replace=False))


def run_rounds(
    protocol: ServerProtocol, executor: Executor, *, seed: int, num_clients: int, clients_per_round: int, rounds: int, start: int = 0
) -> Iterator[dict[str, Any]]:
    """Rounds ``start`` .. ``rounds - 1`` of ``protocol``; yields one metrics record (plain JSON) per round."""
    for rnd in range(start, rounds):
        sampled = sample_clients(seed, rnd, num_clients, clients_per_round)
        tasks = protocol.configure(rnd, sampled)
        replies = executor.map(tasks)
        yield protocol.server_update(rnd, tasks, replies)

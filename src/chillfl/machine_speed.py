"""This machine's speed against the one the CPU cost model was fitted on: ``chillfl list experiments --calibrate``.

The catalogue's CPU minutes (:mod:`chillfl.catalogue`) come from constants fitted on one development machine.
Other CPUs differ by more than the model's own error: on 2026-12-04 a 2-vCPU AMD EPYC (AVX-512) ran the measured
sequential rows in 0.38-0.52 of their minutes, while a shared AVX2 EPYC had taken 1.4-1.9x the estimate
(docs/performance.md, "Time estimates"). Timing one short run whose estimate is known gives the factor that turns the
model's minutes into this machine's: a probe with the demo's data, model and clients, run as the model was fitted
(executor ``sequential``, one thread), its best CPU time of a few tries against its estimate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from chillfl.config import RunConfig, config_from_dict

PROBE_ROUNDS = 10
"""Rounds of the timed probe: about a second on the development machine, long enough that start-up costs are noise."""


def probe_config(rounds: int = PROBE_ROUNDS) -> RunConfig:
    """The probe: one FedAvg run of the demo's setting (8x8 digits, Dirichlet(0.1), the FLex&Chill CNN, 20 clients,
    10 a round, 2 epochs at batch 16, the sampled clients evaluated on their splits), ``rounds`` rounds on the CPU, executor
    ``sequential`` at one thread (the defaults): the kind of run the cost model was fitted on."""
    return config_from_dict({
        "name": "calibration-probe", "seed": 0, "device": "cpu",  # the CPU minutes' machine, also where a GPU is found
        "dataset": {"name": "digits"}, "partition": {"name": "dirichlet", "alpha": 0.1}, "model": {"name": "flexchill_cnn"},
        "federation": {"num_clients": 20, "clients_per_round": 10, "rounds": rounds},
        "client": {"epochs": 2, "batch_size": 16, "lr": 0.05},
        "eval": {"clients": "sampled", "client_split": "proportional", "client_split_size": 50, "validation": 0.2},
    })


@dataclass(frozen=True)
class Calibration:
    """The probe's best CPU seconds here against the cost model's estimate of them."""

    seconds: float
    estimate: float
    rounds: int

    @property
    def factor(self) -> float:
        """What the model's CPU minutes are multiplied by on this machine (below 1: it is faster than the reference)."""
        return self.seconds / self.estimate

    def describe(self) -> str:
        """One line for the listing's notes."""
        return (f"calibrated on this machine: the probe (the demo's FedAvg setting, {self.rounds} rounds, executor sequential, "
                f"one thread) took {self.seconds:.2f} s of CPU against {self.estimate:.2f} s estimated, so every CPU figure "
                f"above is the model's x {self.factor:.2f}")


def calibrate(rounds: int = PROBE_ROUNDS, tries: int = 3, clock: Callable[[], float] = time.process_time) -> Calibration:
    """Time the probe ``tries`` times after a one-round warm-up (imports, the data's first load) and keep the best:
    the machine's speed, not its load. Nothing is written."""
    import chillfl
    from chillfl.catalogue import estimate_cpu_minutes

    if rounds < 1 or tries < 1:
        raise ValueError(f"calibrate: rounds and tries must be at least 1 (got {rounds}, {tries})")
    chillfl.run(config=probe_config(1), progress=False, write=False)
    best = float("inf")
    for _ in range(tries):
        start = clock()
        chillfl.run(config=probe_config(rounds), progress=False, write=False)
        best = min(best, clock() - start)
    estimate = estimate_cpu_minutes(probe_config(rounds))
    if estimate is None:  # the probe's dataset and model are the catalogue's own: a change that drops them is a bug here
        raise RuntimeError("calibrate: the cost model cannot price the probe")
    return Calibration(best, estimate * 60, rounds)

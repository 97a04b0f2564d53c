"""Every registered method stopped and resumed: the cases and the check, shared by the executors' resume tests.

``tests/test_resume_every_method.py`` runs them under the sequential, vectorised and process-pool
executors, ``tests/private_net/test_ray.py`` under Ray. A case runs 3 rounds of a tiny model three
times through the real runner:

* the reference, uninterrupted (no checkpoint written: a ``state_dict()`` with side effects would show);
* a run with a checkpoint every round that crashes in round ``stop + 1`` (after that round's metrics
  line, before its checkpoint: what a kill -9 leaves), ``stop`` = 1 or 2;
* ``resume_experiment`` of that folder.

``metrics.jsonl``, ``model.safetensors`` and ``client_models.safetensors`` must be the reference's, byte
for byte. Figures are not drawn (they are not results, and matplotlib costs seconds).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from chillfl import runner
from chillfl.aggregation.registry import algorithm_names
from chillfl.config import load_config
from chillfl.storage.checkpoint import read_state
from chillfl.executors.pools import WorkerPools
from chillfl.runner import CHECKPOINT, CLIENT_MODELS, MODEL, resume_experiment, run_experiment
from chillfl.settings.distillation import METHODS as SOFT_LABEL_METHODS
from chillfl.settings.prototypes import METHODS as PROTOTYPE_METHODS
from chillfl.temperature import policy_names

TINY: dict[str, Any] = {
    "seed": 5,
    "threads": 1,
    "device": "cpu",
    "dataset.name": "digits",
    "partition.name": "dirichlet",
    "partition.alpha": 0.5,
    "model.name": "mlp",
    "model.hidden": [16],
    "federation.num_clients": 10,  # ~140 training samples each: 5 steps a round
    "federation.clients_per_round": 2,
    "federation.rounds": 3,
    "client.epochs": 1,
    "client.batch_size": 32,
    "client.lr": 0.05,
    "client.momentum": 0.5,
    "eval.client_split_size": 20,
    "checkpoint.client_models": True,
}
SOFT_LABELS: dict[str, Any] = {"public_size": 60, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32}

NEEDS: dict[str, dict[str, Any]] = {
    # what a method needs to run (and to have state worth resuming) on the tiny setup
    # a ResNet with a width-reduced final stage; 20 clients of ~70 samples (3 steps a round, not 5): a run of it cost 2.6 CPU s, the MLP's 0.1
    "algorithm.fedalign": {"model": {"name": "resnet20"}, "federation.num_clients": 20},
    # the generator trained 5 steps a round, not 50, at width 32, not 512 (tests/test_fedgen.py's FAST): still state that a resume must restore
    "algorithm.fedgen": {"algorithm": {"name": "fedgen", "generator_steps": 5, "hidden": 32, "noise_dim": 8}},
    "algorithm.fedbn": {"model": {"name": "flexchill_cnn", "batch_norm": True}},  # local batch-norm entries
    "algorithm.pa3fed": {"algorithm": {"name": "pa3fed", "mode": "always"}},
    "algorithm.qffl": {"client.momentum": 0.0},  # its L = 1/lr reads plain SGD steps: momentum is refused with lipschitz unset
    "algorithm.perfedavg": {"client.momentum": 0.0},  # its meta steps are plain gradient steps: momentum is refused
    "algorithm.krum": {"federation.clients_per_round": 3},  # Krum needs more than 2f + 2 clients a round
    "algorithm.bulyan": {"algorithm": {"name": "bulyan", "f": 1}, "federation.clients_per_round": 7},  # n >= 4f + 3, f = 1: the rule, not the mean
    "algorithm.centered_clip": {"algorithm": {"name": "centered_clip", "tau": 0.3}},  # below the updates' norms (0.3-0.8): v is state that matters
    "algorithm.dnc": {"algorithm": {"name": "dnc", "f": 1, "subsample": 100}},  # drops 1 of 2 a round, from 100 of 1,210 coordinates drawn a round
    "algorithm.norm_bound": {"algorithm": {"name": "norm_bound", "max_norm": 0.3, "sigma": 0.001}},  # M below some updates; the seeded noise drawn
    "temperature.fixed": {"temperature": {"policy": "fixed", "value": 0.5}},
    "temperature.fedchill": {"temperature": {"policy": "fedchill", "patience": 1}},  # decays within 3 rounds
    "distillation.scarlet": {"distillation": {"method": "scarlet", **SOFT_LABELS, "cache_duration": 2}},
    "distillation.fedmd": {"distillation": {"method": "fedmd", **SOFT_LABELS, "transfer_epochs": 1}},
}


def methods() -> list[str]:
    """Every algorithm, temperature policy, soft-label method and prototype method, as ``section.name``."""
    return (
        [f"algorithm.{n}" for n in algorithm_names()]
        + [f"temperature.{p}" for p in policy_names() if p != "none"]  # none: every other case runs it
        + [f"distillation.{m}" for m in SOFT_LABEL_METHODS]
        + [f"prototypes.{m}" for m in PROTOTYPE_METHODS]
    )


def registered() -> set[str]:
    """The methods a resume test must cover (temperature policies aside: they ride on every other case too)."""
    return {f"algorithm.{n}" for n in algorithm_names()} | {f"distillation.{m}" for m in SOFT_LABEL_METHODS} | {f"prototypes.{m}" for m in PROTOTYPE_METHODS}


COMBINED = ("temperature.fedchill+algorithm.scaffold", "temperature.fedchill+distillation.scarlet", "temperature.fedchill+prototypes.fedproto")
"""FedChill's per-client state in each protocol's client state (one table with SCAFFOLD's c_i, the soft-label ClientState, FedProto's).

Every client trains every round and (lr 1e-12) its accuracy stays flat, so each one's T decays after
round 3 (patience 1): the run stops after round 3 and round 4 trains at the T restored from the checkpoint."""
STAGNANT: dict[str, Any] = {"federation.num_clients": 4, "federation.clients_per_round": 4, "federation.rounds": 4, "client.lr": 1e-12}


def overrides(method: str) -> dict[str, Any]:
    if "+" in method:
        return {k: v for part in method.split("+") for k, v in overrides(part).items()} | STAGNANT
    section, name = method.split(".")
    key = {"algorithm": "name", "temperature": "policy"}.get(section, "method")
    base: dict[str, Any] = {section: {key: name, **(SOFT_LABELS if section == "distillation" else {})}}
    return {**base, **NEEDS.get(method, {})}


class Crash(Exception):
    """Stands for a kill -9: raised by a callback, so nothing after it in the round runs."""


class _CrashIn:
    def __init__(self, round: int) -> None:
        self.round = round

    def on_round(self, record: dict[str, Any]) -> None:
        if record["round"] == self.round:
            raise Crash

    def on_end(self, output: object) -> None:
        pass


class SigintAfter:
    """A callback that sends this process SIGINT after round ``n``: the run stops there, checkpointed, as on Ctrl-C."""

    def __init__(self, n: int) -> None:
        self.n = n

    def on_round(self, record: Any) -> None:
        if record["round"] == self.n:
            os.kill(os.getpid(), signal.SIGINT)

    def on_end(self, output: Any) -> None:
        pass


def check_resume(method: str, executor: str, stop: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pools: WorkerPools | None = None,
                 reference_executor: str | None = None, **extra: Any) -> None:
    """Reference, crash after round ``stop``'s checkpoint, resume: the resumed run is the reference, byte for byte.

    ``pools``: worker processes / Ray actors lent to the crashed and resumed runs, as a sweep lends them (None: each
    run starts its own). ``reference_executor``: the executor of the uninterrupted reference (None: ``executor``);
    ``"sequential"`` for an executor promised bitwise equal to it (Ray), without pools: the cut run's rounds and the
    resumed run's must then be the sequential run's, bit for bit (its own uninterrupted run is not run again).
    ``extra``: more overrides for all three runs (e.g. ``[ray]`` options).
    """
    monkeypatch.setattr(runner, "_plots", lambda *args: None)

    def config(name: str, every: int, on: str = executor) -> Any:
        cfg = load_config(None, {**TINY, **extra, "name": name, "out_dir": str(tmp_path), "executor": on, "checkpoint.every": every})
        return cfg.with_overrides(overrides(method))

    if reference_executor is None:
        reference = run_experiment(config("ref", 0), progress=False, pools=pools).folder
    else:
        reference = run_experiment(config("ref", 0, reference_executor), progress=False).folder
    with pytest.raises(Crash):
        run_experiment(config("cut", 1), progress=False, callbacks=[_CrashIn(stop + 1)], pools=pools)
    partial = tmp_path / "cut.partial"
    assert read_state(partial / CHECKPOINT)["round"] == stop
    assert len((partial / "metrics.jsonl").read_text().splitlines()) == stop + 1  # the crashed round's line is there
    resumed = resume_experiment(partial, progress=False, pools=pools).folder
    assert reference is not None and resumed is not None
    assert (resumed / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
    models = [f for f in (MODEL, CLIENT_MODELS) if (reference / f).exists()]
    assert models, "the run saved no model to compare"
    for name in models:
        assert (resumed / name).read_bytes() == (reference / name).read_bytes(), name
    assert sorted(p.name for p in resumed.iterdir()) == sorted(p.name for p in reference.iterdir())

"""Every registered method under every executor: stopped and resumed, a run is bitwise the uninterrupted run.

The cases are generated from the registries: every algorithm, temperature
policy, soft-label method and prototype method, each under the sequential,
vectorised and process-pool executors. Each case runs 3 rounds of a tiny
model three times through the real runner:

* the reference, uninterrupted (no checkpoint written: a ``state_dict()``
  with side effects would show);
* a run with a checkpoint every round that crashes in round ``stop + 1``
  (after that round's metrics line, before its checkpoint: what a kill -9
  leaves), ``stop`` = 1 or 2;
* ``resume_experiment`` of that folder.

The process-pool cases share one pool of spawned workers (:func:`pool`): each run gets its own
:class:`~chillfl.engine.processes.ProcessExecutor` on it, as a run builds one, but the workers (seconds
each to start: they import torch) start once for the module. A worker keeps nothing of a run but its
template, objective and client side, unpickled again for every executor.

``metrics.jsonl``, ``model.safetensors`` and ``client_models.safetensors``
must be the reference's, byte for byte. ``tests/test_resume.py`` kills real
subprocesses for four families; this module covers the whole registry.
Figures are not drawn (they are not results, and matplotlib costs seconds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
import torch

from chillfl import runner
from chillfl.aggregation.registry import algorithm_names
from chillfl.config import load_config
from chillfl.distillation.methods import METHODS as SOFT_LABEL_METHODS
from chillfl.engine import parallel
from chillfl.engine.checkpoint import read_state
from chillfl.engine.processes import ProcessExecutor, WorkerPool
from chillfl.protocols.knowledge import METHODS as PROTOTYPE_METHODS
from chillfl.runner import CHECKPOINT, CLIENT_MODELS, MODEL, resume_experiment, run_experiment
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
    "algorithm.fedalign": {"model": {"name": "resnet20"}},  # a ResNet with a width-reduced final stage
    "algorithm.fedbn": {"model": {"name": "flexchill_cnn", "batch_norm": True}},  # local batch-norm entries
    "algorithm.pa3fed": {"algorithm": {"name": "pa3fed", "mode": "always"}},
    "algorithm.krum": {"federation.clients_per_round": 3},  # Krum needs more than 2f + 2 clients a round
    "temperature.fixed": {"temperature": {"policy": "fixed", "value": 0.5}},
    "distillation.scarlet": {"distillation": {"method": "scarlet", **SOFT_LABELS, "cache_duration": 2}},
    "distillation.fedmd": {"distillation": {"method": "fedmd", **SOFT_LABELS, "transfer_epochs": 1}},
}


def _methods() -> list[str]:
    return (
        [f"algorithm.{n}" for n in algorithm_names()]
        + [f"temperature.{p}" for p in policy_names() if p != "none"]  # none: every other case runs it
        + [f"distillation.{m}" for m in SOFT_LABEL_METHODS]
        + [f"prototypes.{m}" for m in PROTOTYPE_METHODS]
    )


def _overrides(method: str) -> dict[str, Any]:
    section, name = method.split(".")
    key = {"algorithm": "name", "temperature": "policy"}.get(section, "method")
    base: dict[str, Any] = {section: {key: name, **(SOFT_LABELS if section == "distillation" else {})}}
    return {**base, **NEEDS.get(method, {})}


EXECUTORS = ("sequential", "vectorized", "processes")
"""Every executor that runs in this process's tests; Ray's resume cases are in ``tests/private_net/test_ray.py``."""

CASES = [pytest.param(m, ex, 1 + i % 2, id=f"{m}-{ex}") for i, m in enumerate(_methods()) for ex in EXECUTORS]


class _Crash(Exception):
    """Stands for a kill -9: raised by a callback, so nothing after it in the round runs."""


class _CrashIn:
    def __init__(self, round: int) -> None:
        self.round = round

    def on_round(self, record: dict[str, Any]) -> None:
        if record["round"] == self.round:
            raise _Crash

    def on_end(self, output: object) -> None:
        pass


@pytest.fixture(scope="module")
def pool() -> Iterator[WorkerPool]:
    """Two spawned workers (as many as a tiny run's two clients a round get on two cores) for every process-pool case."""
    with WorkerPool(workers=2) as shared:
        yield shared


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)


def test_every_registered_method_has_a_case() -> None:
    ids = {p.values[0] for p in CASES}
    assert {f"algorithm.{n}" for n in algorithm_names()} | {f"distillation.{m}" for m in SOFT_LABEL_METHODS} | {f"prototypes.{m}" for m in PROTOTYPE_METHODS} <= ids
    assert set(NEEDS) <= ids  # no stale entry
    assert {tuple(p.values[:2]) for p in CASES} == {(m, ex) for m in ids for ex in EXECUTORS}


@pytest.mark.parametrize(("method", "executor", "stop"), CASES)
def test_stopped_and_resumed_is_bitwise_the_uninterrupted_run(
    method: str, executor: str, stop: int, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    rounds_on_workers: list[int] = []
    if executor == "processes":  # every run builds its executor as usual, on the module's pool of workers
        shared: WorkerPool = request.getfixturevalue("pool")
        send = shared.round

        def counted(items: Any, decode: Any) -> Any:
            rounds_on_workers.append(len(items))
            return send(items, decode)

        monkeypatch.setattr(shared, "round", counted)
        monkeypatch.setattr(parallel, "ProcessExecutor", lambda model, spec, *, workers, client: ProcessExecutor(model, spec, client=client, pool=shared))

    def config(name: str, every: int) -> Any:
        cfg = load_config(None, {**TINY, "name": name, "out_dir": str(tmp_path), "executor": executor, "checkpoint.every": every})
        return cfg.with_overrides(_overrides(method))

    reference = run_experiment(config("ref", 0), progress=False).folder
    with pytest.raises(_Crash):
        run_experiment(config("cut", 1), progress=False, callbacks=[_CrashIn(stop + 1)])
    partial = tmp_path / "cut.partial"
    assert read_state(partial / CHECKPOINT)["round"] == stop
    assert len((partial / "metrics.jsonl").read_text().splitlines()) == stop + 1  # the crashed round's line is there
    resumed = resume_experiment(partial, progress=False).folder
    assert reference is not None and resumed is not None
    assert (resumed / "metrics.jsonl").read_bytes() == (reference / "metrics.jsonl").read_bytes()
    models = [f for f in (MODEL, CLIENT_MODELS) if (reference / f).exists()]
    assert models, "the run saved no model to compare"
    for name in models:
        assert (resumed / name).read_bytes() == (reference / name).read_bytes(), name
    assert sorted(p.name for p in resumed.iterdir()) == sorted(p.name for p in reference.iterdir())
    if executor == "processes":  # the 3 + (stop + 1) + (3 - stop) rounds trained on the workers
        assert len(rounds_on_workers) >= 7 and all(rounds_on_workers), rounds_on_workers


def test_a_checkpoint_gives_each_tensor_its_layout_back(tmp_path: Path) -> None:
    """FedProto keeps the vectorised executor's client weights, which come back transposed; the same values in
    another layout evaluate to other last bits (a matmul adds up in another order), so a resumed run needs the
    layout back: FedProto under ``vectorized`` differed in ``global_loss`` after a resume (issue 27)."""
    from chillfl.engine.checkpoint import write_state

    w = torch.randn(5, 3).t()  # dense, not contiguous: strides (1, 3)
    permuted = torch.randn(2, 3, 4).permute(2, 0, 1)
    gappy = torch.randn(4, 6)[:, ::2]  # not dense: comes back contiguous, as before
    write_state(tmp_path / "state.safetensors", {"w": w, "p": permuted, "g": gappy, "c": torch.arange(6.0).reshape(2, 3)})
    back = read_state(tmp_path / "state.safetensors")
    for key, t in (("w", w), ("p", permuted)):
        assert torch.equal(back[key], t) and back[key].stride() == t.stride(), key
    assert torch.equal(back["g"], gappy) and back["g"].is_contiguous() and back["c"].is_contiguous()

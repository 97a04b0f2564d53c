"""A pixel trigger is stamped on the training batch after ``[dataset.augment]``'s crop and flip (BadNets, FLPoison,
the DBA authors' ``add_pixel_pattern``): it sits where the probe has it in every batch, and every executor forms
the same stamped batch; without augmentation the batch is the stored rows, stamped, as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from chillfl import runner
from chillfl.attacks.poison import Trigger, poisoned
from chillfl.config import load_config
from chillfl.data import FederatedData
from chillfl.data.augment import Augment
from chillfl.data.datasets import ArrayDataset
from chillfl.engine.protocol import ClientJob
from chillfl.executors.chunk_steps import ResidentBatches, host_batches
from chillfl.runner import run_experiment
from chillfl.settings.attack import parse_attack
from chillfl.training import local
from chillfl.training.local import LocalSpec, batch_order, step_batch
from lent_pools import pools

DIGITS: dict[str, Any] = {
    "seed": 0, "threads": 1, "device": "cpu", "dataset.name": "digits", "partition.name": "iid", "model.name": "mlp", "model.hidden": [16],
    "federation.num_clients": 4, "federation.clients_per_round": 4, "federation.rounds": 1, "client.epochs": 1, "client.batch_size": 32,
    "client.lr": 0.05, "eval.clients": "none", "checkpoint.every": 0,
}


@pytest.fixture(autouse=True)
def _no_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_plots", lambda *args: None)


def test_augmented_training_batches_carry_the_trigger_where_the_probe_has_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # every client attacks with all its rows: every training input must have the 2x2 trigger in its bottom-right corner
    # after the flip, as the probe's inputs have it. Before: stamped, then flipped, about half had it bottom-left instead.
    seen: list[torch.Tensor] = []
    call = local.StepLoss.__call__

    def spy(self: Any, params: Any, buffers: Any, x: torch.Tensor, *rest: Any, **kw: Any) -> Any:
        seen.append(x.detach().clone())
        return call(self, params, buffers, x, *rest, **kw)

    monkeypatch.setattr(local.StepLoss, "__call__", spy)
    attack = {"attack.kind": "backdoor", "attack.clients": [0, 1, 2, 3], "attack.poison_fraction": 1.0, "attack.trigger_size": 2}
    config = load_config(None, {**DIGITS, **attack, "out_dir": str(tmp_path), "name": "flip", "dataset.augment.flip": True})
    run_experiment(config, progress=False)
    x = torch.cat(seen)
    white = x.amax()  # the trigger's value: the training inputs' largest (one channel)
    assert len(x) > 100
    assert bool((x[:, 0, -2:, -2:] == white).all())  # every row, flipped or not
    flipped_away = (x[:, 0, -2:, :2] == white).all(dim=(1, 2))
    assert float(flipped_away.float().mean()) < 0.2  # the bottom-left corner is the image's own (digits: mostly dark)


def _toy() -> tuple[FederatedData, Trigger]:
    # 2 clients of 6 rows of 1 x 4 x 4; row r holds r + column / 10, so a flip shows
    x = torch.arange(12, dtype=torch.float32).reshape(12, 1, 1, 1) + torch.arange(4, dtype=torch.float32).reshape(1, 1, 1, 4) / 10
    x = x.expand(12, 1, 4, 4).clone()
    y = torch.tensor([0, 1, 2] * 4)
    ds = ArrayDataset("toy", x, y, x[:3].clone(), y[:3].clone(), 3)
    data = FederatedData(ds, [np.arange(0, 6), np.arange(6, 12)], [np.zeros(0, np.int64)] * 2, None, np.zeros(0, np.int64))
    return data, Trigger(1, (99.0,))


def _jobs(data: FederatedData) -> list[ClientJob]:
    out = []
    for cid in range(data.num_clients):
        x, y = data.client_train(cid)
        out.append(ClientJob(cid, {}, x, y, 0.1, 1.0, {}, 100 + cid, stamp=data.client_stamp(cid)))
    return out


def _poisoned() -> tuple[FederatedData, Trigger]:
    data, _ = _toy()
    att = parse_attack({"kind": "backdoor", "clients": [1], "poison_fraction": 0.5, "trigger_size": 1, "target": 2})
    out = poisoned(data, att, frozenset({1}), 3)
    return out, Trigger(1, (float(data.dataset.x_train.max()),))


def test_stored_inputs_stay_clean_and_reads_see_the_stamp() -> None:
    data, trigger = _poisoned()
    assert torch.equal(data.dataset.x_train, _toy()[0].dataset.x_train)  # the trigger is a mark, not a rewrite
    x, y = data.client_train(1)
    stamp = data.client_stamp(1)
    assert stamp is not None and data.client_stamp(0) is None
    assert int(stamp.marked.sum()) == 3  # round(0.5 * 6)
    assert bool((x[stamp.marked][:, 0, -1, -1] == trigger.value[0]).all()) and y[stamp.marked].tolist() == [2, 2, 2]
    assert torch.equal(x[~stamp.marked], stamp.clean[~stamp.marked]) and torch.equal(stamp.clean, data.dataset.x_train[6:])


@pytest.mark.parametrize("augment", [Augment(flip=True), Augment(crop_padding=1, padding_mode="constant", flip=True)])
def test_every_executor_forms_the_same_stamped_batch(augment: Augment) -> None:
    data, trigger = _poisoned()
    spec = LocalSpec(epochs=2, batch_size=4, augment=augment)
    jobs = _jobs(data)
    schedules = [batch_order(len(j.y), spec.batch_size, spec.epochs, torch.Generator().manual_seed(j.seed)) for j in jobs]
    host, resident = list(host_batches(jobs, schedules, spec)), list(ResidentBatches(jobs, schedules, spec))
    assert len(host) == len(resident) == 4  # 2 epochs of a batch of 4 and one of 2
    stamp = jobs[1].stamp
    assert stamp is not None
    for s, (a, b) in enumerate(zip(host, resident)):
        assert torch.equal(a.x, b.x)
        for i, job in enumerate(jobs):  # the sequential step (train_client) forms each client's batch alone
            idx = schedules[i][s]
            codes = None if job.stamp is None else job.stamp.marked[idx][None].long()
            alone = step_batch(spec, (job.x if job.stamp is None else job.stamp.clean)[idx][None], [job.seed], s, codes, [trigger])[0]
            assert torch.equal(a.x[i], alone)
            marked = stamp.marked[idx] if i == 1 else torch.zeros(len(idx), dtype=torch.bool)
            assert bool((alone[marked][:, 0, -1, -1] == trigger.value[0]).all())  # the trigger where the probe has it
            clean = step_batch(spec, job.x[idx][None] if i == 0 else stamp.clean[idx][None], [job.seed], s)[0]
            assert torch.equal(alone[~marked], clean[~marked])  # the rest: the clean rows' own crop and flip


def test_without_augmentation_the_batch_is_the_stored_stamped_rows() -> None:
    data, _ = _poisoned()
    spec = LocalSpec(epochs=1, batch_size=6)
    jobs = _jobs(data)
    schedules = [batch_order(len(j.y), spec.batch_size, spec.epochs, torch.Generator().manual_seed(j.seed)) for j in jobs]
    for batch in (next(iter(host_batches(jobs, schedules, spec))), next(iter(ResidentBatches(jobs, schedules, spec)))):
        for i, job in enumerate(jobs):
            assert torch.equal(batch.x[i], job.x[schedules[i][0]])  # the rows as stamped: the bits of before


def _records(tmp_path: Path, name: str, **overrides: Any) -> list[dict[str, Any]]:
    config = load_config(None, {**DIGITS, "out_dir": str(tmp_path), "name": name, **overrides})
    folder = run_experiment(config, progress=False, pools=pools()).folder  # a process pool's workers lent (lent_pools)
    assert folder is not None
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def test_augmented_backdoor_runs_agree_bitwise_across_processes(tmp_path: Path) -> None:
    setup = {"attack.kind": "dba", "attack.fraction": 0.5, "attack.parts": 2, "dataset.augment.flip": True, "dataset.augment.crop_padding": 1,
             "federation.rounds": 2}
    seq = _records(tmp_path, "seq", **setup)
    procs = _records(tmp_path, "procs", **setup, executor="processes")
    assert seq == procs
    assert all(0.0 <= r["attack_success_rate"] <= 1.0 for r in seq)


def test_augmented_backdoor_run_resumes_bitwise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from resume_cases import check_resume

    extra = {"attack.kind": "backdoor", "attack.fraction": 0.5, "federation.clients_per_round": 4, "dataset.augment.flip": True, "dataset.augment.crop_padding": 1}
    check_resume("algorithm.fedavg", "sequential", 1, tmp_path, monkeypatch, **extra)

"""``[distillation] augment_public``: the public pool through ``[dataset.augment]``'s crop and flip in distillation
batches (the SCARLET authors' code reads its pool through the train transform); off by default: the pool as stored."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from chillfl import runner
from chillfl.cli import main
from chillfl.config import load_config
from chillfl.experiment import build_experiment
from chillfl.runner import run_experiment
from chillfl.training import local

BASE: dict[str, Any] = {
    "seed": 0, "threads": 1, "device": "cpu", "dataset.name": "digits", "partition.name": "iid", "model.name": "mlp", "model.hidden": [16],
    "federation.num_clients": 3, "federation.clients_per_round": 3, "federation.rounds": 2, "client.epochs": 1, "client.batch_size": 32,
    "client.lr": 0.05, "eval.clients": "none", "checkpoint.every": 0, "dataset.augment.flip": True,
}
SOFT = {"method": "scarlet", "public_size": 60, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 32}


def _distilled(monkeypatch: pytest.MonkeyPatch, **options: Any) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every distillation batch's inputs (soft targets: 2-d labels) of a short run, and the run's public pool."""
    seen: list[torch.Tensor] = []
    call = local.StepLoss.__call__

    def spy(self: Any, params: Any, buffers: Any, x: torch.Tensor, y: torch.Tensor, *rest: Any, **kw: Any) -> Any:
        if y.dim() == 2:
            seen.append(x.detach().clone())
        return call(self, params, buffers, x, y, *rest, **kw)

    monkeypatch.setattr(runner, "_plots", lambda *args: None)
    monkeypatch.setattr(local.StepLoss, "__call__", spy)
    config = load_config(None, BASE).with_overrides({"distillation": {**SOFT, **options}})
    run_experiment(config, write=False, progress=False)
    return seen, build_experiment(config).data.public()


def _rows_of(batch: torch.Tensor, pool: torch.Tensor) -> tuple[int, int]:
    """(rows of ``batch`` that are a pool row as stored, rows that are a pool row mirrored left-right and not as stored)."""
    flat, mirrored = pool.flatten(1), pool.flip(-1).flatten(1)
    same = [bool((flat == r.flatten()).all(1).any()) for r in batch]
    mirror = [bool((mirrored == r.flatten()).all(1).any()) for r in batch]
    return sum(same), sum(m and not s for m, s in zip(mirror, same))


def test_public_pool_is_read_as_stored_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, pool = _distilled(monkeypatch)
    assert seen
    for batch in seen:
        assert _rows_of(batch, pool) == (len(batch), 0)  # [dataset.augment] flips private batches only


def test_augment_public_flips_the_distillation_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    seen, pool = _distilled(monkeypatch, augment_public=True)
    counts = [_rows_of(batch, pool) for batch in seen]
    assert all(a + b == len(batch) for (a, b), batch in zip(counts, seen))  # every row: a pool row, maybe mirrored
    assert sum(b for _, b in counts) > 0.3 * sum(len(batch) for batch in seen)  # about half mirrored


def test_augment_public_without_augmentation_is_one_line(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.toml"
    config.write_text(f'out_dir = "{tmp_path / "out"}"\n[dataset]\nname = "digits"\n[model]\nname = "mlp"\n[federation]\nnum_clients = 3\nclients_per_round = 3\nrounds = 1\n'
                      '[distillation]\nmethod = "scarlet"\npublic_size = 60\nsubset_size = 20\naugment_public = true\n')
    assert main(["run", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "distillation.augment_public" in err[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())

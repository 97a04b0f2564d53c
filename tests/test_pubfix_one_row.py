"""Public-set batches of one row and a model that cannot train on one sample (batch norm): refused at build where the
config makes them, skipped for the round where a filter leaves one row (pubfix, finding 1).

Before, the server model's distillation (or FedMD's pretraining) raised "Expected more than 1 value per channel when
training" mid-run, a traceback, where the partition check refuses one-row clients in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch import nn

import chillfl
from chillfl.cli import main
from chillfl.protocols.softlabels import server
from chillfl.protocols.softlabels.method import Aggregate
from chillfl.runner import run_experiment

pytestmark = pytest.mark.usefixtures("one_thread")

BASE = """seed = 0
name = "one"
out_dir = "{out}"
[dataset]
name = "digits"
[model]
name = "fedchill_cnn1"
[federation]
num_clients = 2
rounds = 2
[client]
epochs = 1
[distillation]
method = "dsfl"
public_size = 40
subset_size = 20
"""


def base(tmp_path: Path) -> Path:
    path = tmp_path / "base.toml"
    path.write_text(BASE.format(out=(tmp_path / "out").as_posix()), encoding="utf-8")
    return path


@pytest.mark.parametrize(("overrides", "field"), [
    (['distillation.method="scarlet"', "distillation.public_size=1", "distillation.subset_size=1"], "distillation.subset_size"),
    (['distillation.method="fedmd"', "distillation.public_size=1", "distillation.subset_size=1"], "distillation.public_size"),
    (["distillation.distill_batch_size=1"], "distillation.distill_batch_size"),
    (["distillation.server_batch_size=1"], "distillation.server_batch_size"),
])
def test_one_row_public_batches_of_a_batch_norm_model_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], overrides: list[str], field: str) -> None:
    assert main(["run", str(base(tmp_path)), "-q", *overrides]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"chillfl: error: {field}: is 1: "), err
    assert "cannot train on a batch of one sample" in err[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_model_that_trains_on_one_row_is_not_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(base(tmp_path)), "--dry-run", "model.name=mlp", "distillation.public_size=1", "distillation.subset_size=1"]) == 0


def keep_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """A filter (as Selective-FD's can) that keeps only the first requested row of every round."""
    checked = server.check_aggregate

    def one(agg: object, requested: int, width: int, num_classes: int) -> Aggregate:
        a = checked(agg, requested, width, num_classes)
        keep = a.keep.clone()
        keep[1:] = False
        return Aggregate(keep, a.rows[keep[a.keep]], a.server_rows[keep[a.keep]], a.metrics)

    monkeypatch.setattr(server, "check_aggregate", one)


def batch_norm_mlp() -> nn.Module:
    """A small model with batch norm over features (fedchill_cnn1 on digits takes ~20 s here)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))


def test_a_filter_that_leaves_one_row_skips_the_public_rows_of_that_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server model does not distil on the one row, nor the clients next round on it sent down: the round uses no
    public row (``public_used`` 0, as when the filter keeps none), and the run goes on."""
    keep_one_row(monkeypatch)
    config = chillfl.make_config(base(tmp_path), {"federation.rounds": 3, "model.name": "custom"})
    records = chillfl.run(batch_norm_mlp(), config=config, write=False, progress=False).records
    assert [r["public_used"] for r in records] == [0, 0, 0]
    assert [r["public_requested"] for r in records] == [20, 20, 20]


def test_a_model_that_trains_on_one_row_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keep_one_row(monkeypatch)
    records = run_experiment(chillfl.make_config(base(tmp_path), {"model.name": "mlp"}), write=False, progress=False).records
    assert [r["public_used"] for r in records] == [1, 1]

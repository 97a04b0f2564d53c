"""Data from Python beyond tensors (issue 25): a torch Dataset with its own transform, a separate public set for the
soft-label methods, per-client test sets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

import chillfl
from digits_net import Net

SMALL = {"federation": {"num_clients": 4, "rounds": 2}, "client": {"lr": 0.05, "batch_size": 32}, "eval": {"client_split_size": 20}}



@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y)


class Digits(Dataset):
    """A user's Dataset: raw 0..16 pixels, scaled by its own transform when an item is read."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, transform: Any) -> None:
        self.x, self.y, self.transform = x, y, transform
        self.reads = 0

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        self.reads += 1
        return self.transform(self.x[i]), int(self.y[i])


def test_a_dataset_with_its_transform_trains_as_the_same_tensors_do(digits: tuple[torch.Tensor, torch.Tensor], tmp_path: Path) -> None:
    x, y = digits
    train, test = Digits(x[:1400], y[:1400], lambda v: v / 16.0), Digits(x[1400:], y[1400:], lambda v: v / 16.0)
    torch.manual_seed(0)
    model = Net()
    from_dataset = chillfl.run(model, chillfl.DatasetData(train, test, num_classes=10), SMALL, out_dir=tmp_path, progress=False)
    assert train.reads == 1400 and test.reads == 397  # each item read once
    from_tensors = chillfl.run(model, chillfl.TensorData(x[:1400] / 16.0, y[:1400], x[1400:] / 16.0, y[1400:], num_classes=10), SMALL, write=False, progress=False)
    assert from_dataset.records == from_tensors.records
    assert from_dataset.config.dataset["source"] == "dataset" and from_dataset.config.dataset["train_size"] == 1400


def test_a_dataset_must_yield_tensors_and_integer_labels(digits: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = digits
    with pytest.raises(chillfl.ConfigError, match="data.train: item 0's input is a list"):
        chillfl.run(Net(), chillfl.DatasetData(Digits(x[:10], y[:10], lambda v: v.tolist()), Digits(x[10:20], y[10:20], lambda v: v)), SMALL, write=False)
    with pytest.raises(chillfl.ConfigError, match="data.test: is empty"):
        chillfl.run(Net(), chillfl.DatasetData(Digits(x[:10], y[:10], lambda v: v), Digits(x[:0], y[:0], lambda v: v)), SMALL, write=False)


def test_a_separate_public_set_feeds_the_soft_label_method(digits: tuple[torch.Tensor, torch.Tensor], tmp_path: Path) -> None:
    x, y = digits
    x = x / 16.0
    public = x[1200:1400]  # unlabelled, never given to a client
    data = chillfl.TensorData(x[:1200], y[:1200], x[1400:], y[1400:], num_classes=10, public=public)
    config = {**SMALL, "distillation": {"method": "scarlet", "subset_size": 40, "server_epochs": 1, "distill_batch_size": 32}}
    result = chillfl.run(Net(), data, config, out_dir=tmp_path, progress=False)
    assert result.config.distillation["public_size"] == 200 and result.config.dataset["public_size"] == 200
    assert result.folder is not None
    clients = json.loads((result.folder / "partition.json").read_text())["clients"]
    assert sorted(i for c in clients for i in c) == list(range(1200))  # the public rows are no client's
    with pytest.raises(chillfl.ConfigError, match="distillation.public_size: is 100; the public set passed with the data has 200"):
        chillfl.run(Net(), data, {**config, "distillation": {**config["distillation"], "public_size": 100}}, write=False, progress=False)
    with pytest.raises(chillfl.ConfigError, match="data.public: samples must have the training inputs' shape"):
        chillfl.run(Net(), chillfl.TensorData(x[:1200], y[:1200], x[1400:], y[1400:], public=x[:5, :10]), config, write=False)


def test_per_client_test_sets(digits: tuple[torch.Tensor, torch.Tensor]) -> None:
    x, y = digits
    x = x / 16.0
    groups = [list(range(c * 90, (c + 1) * 90)) for c in range(4)]  # indices into the test set, one list per client
    data = chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10, client_test=groups)
    config = {**SMALL, "eval": {"clients": "all"}}
    result = chillfl.run(Net(), data, config, write=False, progress=False)
    assert result.config.eval.client_split == "natural"
    assert result.records[-1]["local_acc"] is not None and result.records[-1]["global_client_acc"] is not None
    with pytest.raises(chillfl.ConfigError, match="data.client_test: client 1: expected indices into the test set"):
        chillfl.run(Net(), chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], client_test=[[0], [9999]]), config, write=False)
    with pytest.raises(chillfl.ConfigError, match="federation.num_clients"):
        chillfl.run(Net(), chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], client_test=groups[:3]), config, write=False)

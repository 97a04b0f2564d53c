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
    assert train.reads == 1400 + 2 * 1400 and test.reads == 397  # read once, then each round its 4 clients' rows anew (redraw="round")
    from_tensors = chillfl.run(model, chillfl.TensorData(x[:1400] / 16.0, y[:1400], x[1400:] / 16.0, y[1400:], num_classes=10), SMALL, write=False, progress=False)
    assert from_dataset.records == from_tensors.records
    train.reads = 0
    once = chillfl.run(model, chillfl.DatasetData(train, test, num_classes=10, redraw="once"), SMALL, write=False, progress=False)
    assert train.reads == 1400 and once.records == from_tensors.records  # each item read once
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
    with pytest.raises(chillfl.ConfigError, match="distillation.public_size: is 100; the public set that comes with the data has 200 samples: set it to 200"):
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


def test_client_test_sets_are_used_under_a_saved_or_resolved_config(digits: tuple[torch.Tensor, torch.Tensor]) -> None:
    """A saved or resolved config carries ``eval.client_split = "proportional"`` (the default, filled in): reused with data
    that has ``client_test`` (``config=result.config``, ``chillfl.make_config(...)``, a run's ``config.toml``), it made
    local accuracy silently ignore the client test sets; the data decide, unless "none" or a keyword asks otherwise."""
    x, y = digits
    x = x / 16.0
    groups = [list(range(c * 90, (c + 1) * 90)) for c in range(4)]
    data = chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10, client_test=groups)
    plain = chillfl.TensorData(x[:1400], y[:1400], x[1400:], y[1400:], num_classes=10)
    net = Net()  # one initial model: the runs work on copies
    earlier = chillfl.run(net, plain, SMALL, write=False, progress=False)
    assert earlier.config.eval.client_split == "proportional"
    direct = chillfl.run(net, data, SMALL, write=False, progress=False)
    for config in (earlier.config, chillfl.make_config(SMALL), {**SMALL, "eval": {"client_split": "proportional"}}):
        again = chillfl.run(net, data, config, write=False, progress=False)
        assert again.config.eval.client_split == "natural"
        assert again.records == direct.records
    kept = chillfl.run(net, data, {**SMALL, "eval": {"client_split": "none", "clients": "none"}}, write=False, progress=False)
    assert kept.config.eval.client_split == "none"  # no client evaluation, as asked
    asked = chillfl.run(net, data, earlier.config, write=False, progress=False, **{"eval.client_split": "proportional"})
    assert asked.config.eval.client_split == "proportional"  # a keyword is a choice, as a compare grid over it is
    assert asked.records == earlier.records


class RandomlyShifted(Dataset):
    """A random augmentation as torchvision and albumentations draw it: from torch's, Python's and NumPy's global RNGs."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x / 16.0, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        import random

        import numpy as np

        return self.x[i] + 0.1 * torch.randn(64) + 0.01 * random.random() + 0.01 * float(np.random.rand()), int(self.y[i])


def trained_inputs(data: chillfl.DatasetData, executor: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[tuple[int, int], torch.Tensor], list[dict[str, Any]]]:
    """What every client update received as its training inputs, by (round, client), and the run's records."""
    from chillfl.executors.sequential import SequentialExecutor
    from chillfl.executors.vectorized import VectorizedExecutor

    seen: dict[tuple[int, int], torch.Tensor] = {}
    for cls in (SequentialExecutor, VectorizedExecutor):
        def spy(self: Any, tasks: Any, _map: Any = cls.map) -> Any:
            seen.update({(t.round, t.client_id): t.data.x.clone() for t in tasks})
            return _map(self, tasks)

        monkeypatch.setattr(cls, "map", spy)
    config = {"federation": {"num_clients": 3, "clients_per_round": 2, "rounds": 4}, "client": {"batch_size": 32}, "executor": executor, "seed": seed}
    torch.manual_seed(0)
    result = chillfl.run(Net(), data, config, write=False, progress=False)
    monkeypatch.undo()
    return seen, result.records


def test_random_transforms_are_drawn_anew_each_visit_and_bitwise_reproducible(digits: tuple[torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = digits
    data = chillfl.DatasetData(RandomlyShifted(x[:240], y[:240]), RandomlyShifted(x[1400:1500], y[1400:1500]), num_classes=10)
    seq, records = trained_inputs(data, "sequential", 0, monkeypatch)
    by_client: dict[int, list[torch.Tensor]] = {}
    for (_, cid), inputs in sorted(seq.items()):
        by_client.setdefault(cid, []).append(inputs)
    visited = [v for v in by_client.values() if len(v) > 1]
    assert visited  # 4 rounds of 2 clients out of 3: some client is sampled twice
    for visits in visited:  # a fresh draw at every visit (same rows: only the augmentation differs)
        assert all(not torch.equal(a, b) for i, a in enumerate(visits) for b in visits[i + 1 :])
        assert all(a.shape == visits[0].shape for a in visits)
    again, records_again = trained_inputs(data, "sequential", 0, monkeypatch)
    vec, records_vec = trained_inputs(data, "vectorized", 0, monkeypatch)
    for other in (again, vec):  # the same seed: bitwise the same inputs, whatever the executor and the RNGs' states before
        assert other.keys() == seq.keys() and all(torch.equal(other[k], seq[k]) for k in seq)
    assert records_again == records
    other_seed, _ = trained_inputs(data, "sequential", 1, monkeypatch)
    assert all(not torch.equal(v, seq[k]) for k, v in other_seed.items() if k in seq)  # the draws follow the run seed


def test_redraw_once_keeps_the_first_read_and_reading_leaves_the_users_rngs_alone(digits: tuple[torch.Tensor, torch.Tensor], monkeypatch: pytest.MonkeyPatch) -> None:
    import random

    import numpy as np

    from chillfl.data.items import materialize

    x, y = digits
    train = RandomlyShifted(x[:240], y[:240])
    once = chillfl.DatasetData(train, RandomlyShifted(x[1400:1500], y[1400:1500]), num_classes=10, redraw="once")
    states = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    first = materialize(train, "data.train", "train")
    assert torch.equal(torch.get_rng_state(), states[0]) and random.getstate() == states[1] and (np.random.get_state()[1] == states[2]).all()
    assert torch.equal(materialize(train, "data.train", "train")[0], first[0])  # a pure function of (split, item)
    seen, _ = trained_inputs(once, "sequential", 0, monkeypatch)
    first_visit: dict[int, torch.Tensor] = {}
    for (_, cid), inputs in sorted(seen.items()):
        assert torch.equal(inputs, first_visit.setdefault(cid, inputs))  # every visit trains on the first read
    assert len(first_visit) < len(seen)  # some client was visited twice
    with pytest.raises(chillfl.ConfigError, match="data.redraw: must be one of 'round', 'once', got 'epoch'"):
        chillfl.run(Net(), chillfl.DatasetData(train, train, redraw="epoch"), write=False, progress=False)

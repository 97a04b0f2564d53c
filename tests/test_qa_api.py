"""The Python API's inputs a notebook user gets wrong: each is one ConfigError naming the field, before anything runs.

Tiny: 64 random inputs, a linear model, nothing trained unless a test says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

import chillfl
from chillfl.errors import ConfigError

SMALL = {"federation": {"num_clients": 2, "rounds": 1}}


def tensors() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(80, 6, generator=g), torch.arange(80) % 3
    return chillfl.TensorData(x[:60], y[:60], x[60:], y[60:], num_classes=3)


def refused(**kwargs: Any) -> ConfigError:
    kwargs = {"model": nn.Linear(6, 3), "data": tensors(), "config": SMALL, "write": False, "progress": False, **kwargs}
    with pytest.raises(ConfigError) as exc:
        chillfl.run(**kwargs)
    return exc.value


def test_a_model_on_the_meta_device_is_refused() -> None:
    exc = refused(model=nn.Linear(6, 3, device="meta"))
    assert exc.field == "model" and "meta device" in exc.message


class Items(Dataset):
    """A map-style Dataset whose item ``bad`` fails to read, as a corrupt file or a broken transform does."""

    def __init__(self, data: TensorDataset, bad: int = -1) -> None:
        self.data, self.bad = data, bad

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if i == self.bad:
            raise OSError("image file is truncated")
        return self.data[i]


def test_a_dataloader_or_an_item_that_fails_to_read_is_refused_naming_the_split() -> None:
    d = tensors()
    train, test = TensorDataset(d.x_train, d.y_train), TensorDataset(d.x_test, d.y_test)
    exc = refused(data=chillfl.DatasetData(DataLoader(train, batch_size=8), test))
    assert exc.field == "data.train" and "pass its .dataset" in exc.message
    exc = refused(data=chillfl.DatasetData(train, Items(test, bad=5)))
    assert exc.field == "data.test" and exc.message == "reading item 5 failed: OSError: image file is truncated"


def test_nested_client_test_indices_are_refused_naming_the_client() -> None:
    d = tensors()
    exc = refused(data=chillfl.TensorData(d.x_train, d.y_train, d.x_test, d.y_test, client_test=[[0, [1, 2]], [3]]))
    assert exc.field == "data.client_test" and exc.message.startswith("client 0:")


def test_one_callback_passed_without_a_list_is_refused() -> None:
    def on_round(record: dict[str, Any]) -> None:
        pass

    for bare in (on_round, 5):
        exc = refused(callbacks=bare)
        assert exc.field == "callbacks" and "callbacks=[...]" in exc.message


def test_a_grid_over_the_dataset_of_a_comparison_on_own_data_is_refused() -> None:
    """The variant would record ``[dataset] name = "digits"`` while training on the tensors passed (as ``model.name`` is refused)."""
    with pytest.raises(ConfigError) as exc:
        chillfl.compare(model=nn.Linear(6, 3), data=tensors(), config=SMALL, grid={"dataset.name": ["digits"]}, write=False, progress=False)
    assert exc.value.field == "dataset.name" and "'custom'" in exc.value.message


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_layers_frozen_with_requires_grad_false_are_not_trained(executor: str) -> None:
    """A researcher's frozen backbone (``requires_grad_(False)``) keeps its weights; the rest trains."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    model[0].requires_grad_(False)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    result = chillfl.run(model=model, data=tensors(), config={**SMALL, "executor": executor, "client": {"lr": 0.1}}, write=False, progress=False)
    assert result.state is not None
    assert torch.equal(result.state["0.weight"], start["0.weight"]) and torch.equal(result.state["0.bias"], start["0.bias"])
    assert not torch.equal(result.state["2.weight"], start["2.weight"])


def test_a_table_valued_override_merges_key_by_key() -> None:
    base = {"federation": {"num_clients": 2, "rounds": 3}, "partition": {"name": "dirichlet", "alpha": 0.1}}
    merged = chillfl.make_config(base, {"federation": {"rounds": 1}, "partition": {"name": "iid"}})
    assert (merged.federation.num_clients, merged.federation.rounds) == (2, 1)
    assert merged.partition["name"] == "iid" and "alpha" not in merged.partition  # another implementation starts afresh, as a dotted key does
    assert merged == chillfl.make_config(base, {"federation.rounds": 1, "partition.name": "iid"})


class Detached(nn.Module):
    """Logits cut off from the weights: a ``.detach()`` left in the forward."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).detach()


class EvalOnly(Detached):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            raise RuntimeError("call .eval() first")
        return self.linear(x)


def test_a_model_that_cannot_train_is_refused_before_the_folder_exists(tmp_path: Path) -> None:
    exc = refused(model=Detached(), write=True, out_dir=tmp_path / "out")
    assert exc.field == "model" and "do not depend on its trainable parameters" in exc.message
    exc = refused(model=EvalOnly(), write=True, out_dir=tmp_path / "out")
    assert exc.field == "model" and exc.message.endswith("fails in training mode on a batch of inputs of shape (2, 6): RuntimeError: call .eval() first")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("method", ["dsfl", "scarlet", "fedmd"])
def test_frozen_layers_stay_frozen_in_the_soft_label_methods_server_and_distillation_phases(method: str) -> None:
    """The server model's distillation, the clients' distillation on the public rows and FedMD's public pretraining were
    phases built without :attr:`LocalSpec.frozen`: a frozen backbone (``requires_grad_(False)``) was trained there."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    model[0].requires_grad_(False)
    start = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(1)
    public = (torch.randn(30, 6, generator=g), torch.arange(30) % 3)
    d = tensors()
    data = chillfl.TensorData(d.x_train, d.y_train, d.x_test, d.y_test, num_classes=3, public=public)
    distill = {"method": method, "public_size": 30, "subset_size": 20, "server_epochs": 1, "distill_batch_size": 8,
               **({"transfer_epochs": 1} if method == "fedmd" else {})}
    config = {"federation": {"num_clients": 2, "rounds": 2}, "client": {"lr": 0.1}, "distillation": distill}
    result = chillfl.run(model=model, data=data, config=config, write=False, progress=False)
    assert result.state is not None
    assert torch.equal(result.state["0.weight"], start["0.weight"]) and torch.equal(result.state["0.bias"], start["0.bias"])
    assert not torch.equal(result.state["2.weight"], start["2.weight"])


def test_every_training_phase_keeps_the_frozen_parameters() -> None:
    """A phase (distillation, a server model, public pretraining) keeps the run's frozen set, as private training does."""
    from chillfl.training.local import LocalSpec

    spec = LocalSpec(epochs=1, batch_size=8, frozen=frozenset({"0.weight"}))
    assert spec.phase(2, 4).frozen == frozenset({"0.weight"})

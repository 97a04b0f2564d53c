"""A run leaves the caller's accelerator generators alone: no ``torch.manual_seed`` (which reseeds every CUDA device,
or queues that reseed on a machine where CUDA has not started) in a model's initialisation, IFCA's or FedGen's."""

from typing import Any

import pytest
import torch
from torch import nn

import chillfl


def _data() -> chillfl.TensorData:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(120, 1, 8, 8, generator=g), torch.randint(0, 4, (120,), generator=g)
    return chillfl.TensorData(x[:96], y[:96], x[96:], y[96:], num_classes=4)


def _own_model() -> nn.Module:
    torch.manual_seed(0)  # before the recording starts
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4))


@pytest.mark.parametrize(("algorithm", "registered"), [("fedavg", True), ("ifca", False), ("fedgen", False)])
def test_run_reseeds_no_cuda_generator(algorithm: str, registered: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The registered model alone draws its initialisation; IFCA's and FedGen's own draws are seen with a user's model."""
    model = None if registered else _own_model()
    calls: list[Any] = []
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: calls.append(seed))
    monkeypatch.setattr(torch.cuda, "manual_seed", lambda seed: calls.append(seed))
    config: dict[str, Any] = {"algorithm": {"name": algorithm}, "federation": {"num_clients": 4, "rounds": 1}}
    if registered:
        config["model"] = {"name": "mlp"}
    state = torch.get_rng_state()
    out = chillfl.run(model=model, data=_data(), config=config, write=False, progress=False)
    assert len(out.records) == 1
    assert calls == []
    assert torch.equal(torch.get_rng_state(), state)  # the CPU's was forked already, and still is

"""A buffer registered ``persistent=False`` is the module's own constant, not model state: not averaged, noised, priced
or saved, so ``Result.state`` and ``model.safetensors`` are the model's ``state_dict()`` and load into its class."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import safetensors.torch
import torch
from torch import nn

import chillfl

pytestmark = pytest.mark.usefixtures("one_thread")


class Cached(nn.Module):
    """A hidden layer shifted by a non-persistent table (a rotary cache's kind) and scaled by a persistent one."""

    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 3)
        self.register_buffer("shift", torch.linspace(-0.1, 0.1, 16), persistent=False)
        self.register_buffer("scale", torch.ones(16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.relu(self.l1(x) * self.scale + self.shift))


def data() -> chillfl.TensorData:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(60, 8, generator=gen)
    y = torch.arange(60) % 3
    return chillfl.TensorData(x, y, x[:15], y[:15])


def run(tmp_path: Path, **config: Any) -> chillfl.Result:
    torch.manual_seed(0)
    cfg = {"federation": {"num_clients": 3, "rounds": 2}, "client": {"batch_size": 10, "lr": 0.05}, **config}
    return chillfl.run(model=Cached(), data=data(), config=cfg, out_dir=tmp_path, progress=False)


@pytest.mark.parametrize("privacy", [{}, {"privacy": {"mechanism": "dp-fedavg", "noise_multiplier": 0.5}}], ids=["fedavg", "dp-fedavg"])
def test_a_non_persistent_buffer_is_not_state_and_the_saved_model_loads(tmp_path: Path, privacy: dict[str, Any]) -> None:
    result = run(tmp_path, **privacy)
    assert set(result.state) == set(Cached().state_dict())  # "shift" was in it (averaged, noised, saved)
    assert torch.equal(result.model.shift, Cached().shift)  # the constant the model was built with, never noised
    assert result.folder is not None
    fresh = Cached()
    fresh.load_state_dict(safetensors.torch.load_file(result.folder / "model.safetensors"), strict=True)
    fresh.load_state_dict(result.state, strict=True)


def test_every_executor_reads_the_buffer_from_the_module(tmp_path: Path) -> None:
    # vectorized (functional_call over stacked parameters) and sequential agree: the forward saw the buffer in both
    a = run(tmp_path / "s", executor="sequential")
    b = run(tmp_path / "v", executor="vectorized")
    assert a.state.keys() == b.state.keys()
    assert all(torch.allclose(a.state[k], b.state[k], atol=1e-5) for k in a.state)
    torch.manual_seed(0)
    model = Cached()
    model.shift.zero_()  # the same run without the shift trains other weights: the executors did read it
    c = chillfl.run(model=model, data=data(), config={"federation": {"num_clients": 3, "rounds": 2}, "client": {"batch_size": 10, "lr": 0.05},
                                                      "executor": "vectorized"}, write=False, progress=False)
    assert not torch.allclose(b.state["l1.weight"], c.state["l1.weight"], atol=1e-5)


def test_a_run_stopped_and_resumed_is_the_whole_run(tmp_path: Path) -> None:
    def stop(record: dict[str, Any], view: Any) -> None:
        if record["round"] == 1:
            view.stop("half")

    whole = run(tmp_path / "whole", checkpoint={"every": 1})
    torch.manual_seed(0)
    cut = chillfl.run(model=Cached(), data=data(), out_dir=tmp_path / "cut", progress=False, callbacks=[stop],
                      config={"federation": {"num_clients": 3, "rounds": 2}, "client": {"batch_size": 10, "lr": 0.05}, "checkpoint": {"every": 1}})
    assert cut.folder is not None
    resumed = chillfl.resume(cut.folder, model=Cached(), data=data(), progress=False)
    assert resumed.state.keys() == whole.state.keys()
    assert all(torch.equal(resumed.state[k], whole.state[k]) for k in whole.state)
